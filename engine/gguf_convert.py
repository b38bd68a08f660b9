"""Convert a GGUF file to a float32 safetensors checkpoint one tensor at a time.

Loading a GGUF through ``AutoModelForCausalLM.from_pretrained(..., gguf_file=...)`` and then
``save_pretrained`` holds the whole dequantised model several times over (8.4 GiB peak for a
1.5B model, benchmarks/gguf_memory.py). Here the file is memory-mapped, each tensor is
dequantised, fixed up with the architecture's own transformers ``TensorProcessor`` (Llama's Q/K
un-permutation and the like) and appended to the current shard; a shard is written and dropped
as soon as it is full. Peak memory stays near one shard plus one tensor. Names and fix-ups come
from transformers' GGUF helpers, so the weights are bitwise those ``from_pretrained`` would load.
"""

from __future__ import annotations

import json
import logging
import mmap
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import ModelLoadError

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

MAX_SHARD_BYTES = 512 << 20
"""Largest shard written (a single larger tensor gets a shard of its own)."""
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


@dataclass(slots=True)
class _ShardWriter:
    """Collects tensors and writes a shard whenever the next tensor would overflow it.

    Shard files get provisional names while the total count is unknown; ``finish`` renames them
    to the standard ``model-0000i-of-0000N.safetensors`` (or ``model.safetensors`` when one
    suffices) and writes the index transformers and ``load_state_dict`` read.
    """

    directory: Path
    max_bytes: int
    _pending: dict[str, torch.Tensor] = field(default_factory=dict)
    _pending_bytes: int = 0
    _shards: list[list[str]] = field(default_factory=list)
    _total_bytes: int = 0

    def add(self, name: str, tensor: torch.Tensor) -> None:
        """Queue one tensor; flush the current shard first when it would grow past the limit."""
        if name in self._pending or any(name in shard for shard in self._shards):
            raise ValueError(f"tensor {name!r} was produced twice")
        size = tensor.numel() * tensor.element_size()
        if self._pending and self._pending_bytes + size > self.max_bytes:
            self._flush()
        self._pending[name] = tensor
        self._pending_bytes += size
        self._total_bytes += size

    def _flush(self) -> None:
        from safetensors.torch import save_file

        if not self._pending:
            return
        path = self.directory / f"shard-{len(self._shards):05d}.partial"
        save_file(self._pending, str(path), metadata={"format": "pt"})
        self._shards.append(list(self._pending))
        self._pending = {}
        self._pending_bytes = 0

    def finish(self) -> list[Path]:
        """Write the last shard, give the shards their final names and write the index."""
        self._flush()
        if not self._shards:
            raise ValueError("the GGUF produced no tensors for this model")
        count = len(self._shards)
        files: list[Path] = []
        weight_map: dict[str, str] = {}
        for i, names in enumerate(self._shards):
            final = SINGLE_FILE if count == 1 else f"model-{i + 1:05d}-of-{count:05d}.safetensors"
            (self.directory / f"shard-{i:05d}.partial").rename(self.directory / final)
            files.append(self.directory / final)
            weight_map.update(dict.fromkeys(names, final))
        if count > 1:
            index = {"metadata": {"total_size": self._total_bytes}, "weight_map": weight_map}
            (self.directory / INDEX_FILE).write_text(json.dumps(index, indent=2, sort_keys=True))
            files.append(self.directory / INDEX_FILE)
        return files


def _as_float32(weights: Any) -> torch.Tensor:
    """A contiguous, writable float32 copy of a dequantised numpy array.

    Float32 is what the old whole-model conversion stored; casting a float16/bfloat16 value to
    float32 is exact, so going through numpy or torch gives the same bits.
    """
    import numpy as np
    import torch

    return torch.from_numpy(np.array(weights, dtype=np.float32, order="C", copy=True))


def _drop_mapped_pages(reader: Any) -> None:
    """Unmap the pages of the memory-mapped GGUF read so far from this process.

    Dequantising touches every page of the file, and touched pages stay in the resident set
    (file-backed, but counted) until unmapped: without this a 2.6 GB GGUF adds 2.6 GB to the
    peak RSS. ``MADV_DONTNEED`` on a read-only shared mapping only drops the mapping; the data
    stays in the page cache and is faulted back in if touched again, so nothing changes.
    """
    mapping = getattr(reader.data, "_mmap", None)  # numpy.memmap keeps its mmap here
    if isinstance(mapping, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
        mapping.madvise(mmap.MADV_DONTNEED)


def _check_legacy_architecture(architecture: str) -> None:
    """Refuse architectures transformers loads through its newer GGUF path.

    For those (qwen35, lfm2 in transformers 5.24) ``from_pretrained`` no longer goes through
    ``load_gguf_checkpoint`` and its TensorProcessors, so our conversion could silently differ
    from what transformers loads; a clear error beats subtly wrong weights.
    """
    try:
        from transformers.integrations.gguf.utils import is_gguf_arch_supported
    except ImportError:  # an older transformers: every architecture is the legacy path
        return
    if is_gguf_arch_supported(architecture):
        raise ModelLoadError(
            f"GGUF architecture {architecture!r} is not supported by the tensor-by-tensor "
            "conversion; convert it to a Hugging Face model directory and use that"
        )


def _tensor_name_map(config: Any, processor: Any) -> tuple[dict[str, str], str]:
    """GGUF→HF tensor names, from a weightless (meta-device) skeleton of the model.

    transformers derives the mapping from the model's own ``state_dict`` keys, so building the
    skeleton is the only way to get the same names it would load; on the meta device it costs
    no memory. Also returns the class name, which ``config.json``'s ``architectures`` needs.
    """
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import get_gguf_hf_weights_map

    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    return get_gguf_hf_weights_map(skeleton, processor), type(skeleton).__name__


def _write_tensors(gguf_path: Path, config: Any, target: Path, max_shard_bytes: int) -> str:
    """Dequantise every mapped tensor of ``gguf_path`` into shards in ``target``.

    Returns the model class name. Tensors that map to no HF name are skipped, as transformers
    skips them. Some MoE processors assemble experts into ``parsed_parameters["tensors"]``
    across several GGUF tensors instead of returning them; those are written at the end.
    """
    import torch
    from gguf import GGUFReader, dequantize
    from transformers.modeling_gguf_pytorch_utils import (
        TENSOR_PROCESSORS,
        TensorProcessor,
        load_gguf_checkpoint,
        read_field,
    )

    reader = GGUFReader(gguf_path)  # memory-mapped: tensor data is paged in on use
    architecture = read_field(reader, "general.architecture")[0]
    _check_legacy_architecture(architecture)
    # The processor gets the raw parsed GGUF config, exactly as in ``load_gguf_checkpoint``.
    parsed: dict[str, Any] = load_gguf_checkpoint(str(gguf_path), return_tensors=False)
    processor = TENSOR_PROCESSORS.get(architecture, TensorProcessor)(config=parsed["config"])
    name_map, class_name = _tensor_name_map(config, processor)

    assembled: dict[str, torch.Tensor] = {}  # what a processor builds across several tensors
    side_channel = {**parsed, "tensors": assembled}
    writer = _ShardWriter(target, max_shard_bytes)
    skipped: list[str] = []
    for tensor in reader.tensors:
        weights = dequantize(tensor.data, tensor.tensor_type)
        result = processor.process(
            weights=weights,
            name=tensor.name,
            tensor_key_mapping=name_map,
            parsed_parameters=side_channel,
        )
        del weights
        if result.name is None:
            continue  # consumed into ``assembled`` by the processor
        hf_name = name_map.get(result.name)
        if hf_name is None:
            skipped.append(result.name)
            continue
        writer.add(hf_name, _as_float32(result.weights))
        _drop_mapped_pages(reader)
    for hf_name in sorted(assembled):
        writer.add(hf_name, assembled.pop(hf_name).to(dtype=torch.float32))
    writer.finish()
    if skipped:
        logger.info("GGUF tensors with no model parameter, skipped: %s", ", ".join(skipped))
    return class_name


def write_converted_gguf(
    gguf_path: Path, target: Path, *, max_shard_bytes: int | None = None
) -> None:
    """Write a loadable float32 Hugging Face checkpoint of ``gguf_path`` into ``target``.

    ``target`` must exist (the caller publishes it atomically). It receives the safetensors
    shards of at most ``max_shard_bytes`` (default ``MAX_SHARD_BYTES``, read at call time) plus
    an index when there are several, ``config.json``, ``generation_config.json`` and the tokenizer.
    A GGUF without ``output.weight`` has tied embeddings: its config says so and no
    ``lm_head.weight`` is written; transformers re-ties it on load.
    """
    import torch
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    config = AutoConfig.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    limit = MAX_SHARD_BYTES if max_shard_bytes is None else max_shard_bytes
    class_name = _write_tensors(gguf_path, config, target, limit)
    config.architectures = [class_name]
    config.dtype = torch.float32
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(target)
    GenerationConfig.from_model_config(config).save_pretrained(target)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    tokenizer.save_pretrained(target)
