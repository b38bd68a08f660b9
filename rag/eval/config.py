"""Evaluation configurations: TOML files of ``Settings`` overrides, named by their file stem.

    # n5.toml: five sampled answers per question, self-consistency vote
    num_candidates = 5
    top_k = 8

Any ``Settings`` field may be set (``guards_enabled``, ``num_candidates``, ``top_k``,
``max_tokens``, ``abstain_below``, ``knowledge_graph``, ...); an unknown key is an error that
lists the known ones. Without ``--config`` the run has one configuration, ``default``: the
settings as the environment gives them.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rag.errors import InvalidInputError
from rag.settings import Settings
from rag.settings.sources import KEYWORDS

DEFAULT_NAME = "default"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
ENGINE_FIELDS = (
    "model",
    "generator",
    "device",
    "dtype",
    "allow_hub",
    "model_cache_dir",
    "max_num_seqs",
    "max_num_batched_tokens",
    "kv_cache_memory_mb",
    "quantization",
    "speculative",
    "num_speculative_tokens",
    "prompt_lookup_max",
    "prompt_lookup_min",
    "speculative_max_seqs",
    "draft_model",
    "num_draft_tokens",
    "draft_quantization",
    "decoding",
    "amateur_model",
    "contrast_weight",
    "contrast_cutoff",
)
"""Settings that change the loaded generator: configurations equal on these share one."""
EMBEDDER_FIELDS = ("embedding_model", "device", "allow_hub")


@dataclass(frozen=True, slots=True)
class EvalConfig:
    """One configuration of a run: a name and the settings it overrides."""

    name: str
    overrides: dict[str, Any] = field(default_factory=dict)

    def settings(self, base: dict[str, Any]) -> Settings:
        """The environment's settings, then ``base`` (the command's), then this config's."""
        return Settings(**{**base, **self.overrides})


def load_config(path: Path) -> EvalConfig:
    """Read a TOML configuration; its name is the file's stem."""
    if not path.is_file():
        raise InvalidInputError(f"configuration {path} does not exist")
    if not _NAME.match(path.stem):
        raise InvalidInputError(
            f"configuration {path}: its name (the file stem) becomes a folder name; "
            "use 1-64 letters, digits, '_', '.' or '-'"
        )
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInputError(f"{path}: invalid TOML ({exc})") from exc
    known = KEYWORDS  # every name Settings takes as a flat keyword
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise InvalidInputError(
            f"{path}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    return EvalConfig(path.stem, data)


def load_configs(paths: list[Path]) -> list[EvalConfig]:
    """The configurations of a run (``default`` when none is given); names must differ."""
    configs = [load_config(p) for p in paths] or [EvalConfig(DEFAULT_NAME)]
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise InvalidInputError(
            f"configuration names (file stems) must differ, got {', '.join(names)}"
        )
    return configs


def engine_key(settings: Settings) -> tuple[Any, ...]:
    return tuple(settings.get(name) for name in ENGINE_FIELDS)


def embedder_key(settings: Settings) -> tuple[Any, ...]:
    return tuple(settings.get(name) for name in EMBEDDER_FIELDS)
