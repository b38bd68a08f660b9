"""Guard settings: candidates, the guards that run, the judge and the confidence models."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from rag.settings.base import Group, empty_is_none


class GuardSettings(Group):
    """The checks on each answer: candidates, guards, the judge, the confidence models."""

    guards_enabled: bool = Field(True, description="check every answer and decide")
    num_candidates: int = Field(
        1, ge=1, le=16, description="answers sampled per question (>1: self-consistency vote)"
    )
    candidate_temperature: float = Field(0.7, ge=0.0, le=2.0, description="sampling for n > 1")
    candidate_max_tokens: int = Field(
        48,
        ge=1,
        le=4096,
        description="length limit of the extra samples (n > 1): their meaning is compared, "
        "so the first sentences suffice",
    )
    names: list[str] | None = Field(
        None,
        description="guards to run, by registered name (JSON list); empty = every registered "
        "guard (repetition, grounding, self_consistency, answer_evidence, evidence_conflict, "
        "self_verification, judge, knowledge_graph)",
    )
    self_verification: bool = Field(
        False,
        description="ask the generator whether its answer is supported (P(yes) on the shared "
        "prefix, one short prefill); off by default: at chance for the 135M default model",
    )
    judge_model: str | None = Field(
        None,
        description="the judge (guard 'judge'): a model asked whether each uncertain answer is "
        "correct and supported. Empty = the generator itself when it is qwen2.5-coder-1.5b, "
        "else off; 'off'; 'generator'; or a model as RAGGUARD_MODEL takes (a second engine)",
    )
    judge_quantization: Literal["int8"] | None = Field(
        "int8",
        description="a judge on an engine of its own: its weights (int8 by default: the 1.5B "
        "in float32 is 6 GB); the generator's own setting applies when it judges itself",
    )
    judge_min_confidence: float = Field(
        0.1,
        ge=0.0,
        le=1.0,
        description="the judge reads answers whose first-stage confidence is at least this "
        "... (default: the band the profile's confidence was fitted with, else 0.1-0.9)",
    )
    judge_max_confidence: float = Field(
        0.9, ge=0.0, le=1.0, description="... and at most this (0 and 1: every answer)"
    )
    judge_passages: Literal["cited", "all"] = Field(
        "cited", description="what the judge reads: the passages the answer cites, or all"
    )
    judge_confidence_model: Path | None = Field(
        None,
        description="second-stage confidence for judged answers (JSON); empty = the shipped "
        "one of the generator's profile",
    )
    stop_on_loop: bool = Field(
        True, description="end a generation as soon as it falls into a repetition loop"
    )
    knowledge_graph: Path | None = Field(
        None, description="triples file to check answers against; empty = the demo graph"
    )
    knowledge_graph_aliases: Path | None = None
    confidence_model: Path | None = Field(
        None, description="fitted confidence model (JSON); empty = the shipped fitted default"
    )

    _empty_is_none = field_validator("judge_quantization", mode="before")(empty_is_none)

    @model_validator(mode="after")
    def _judge_band(self) -> GuardSettings:
        if self.judge_min_confidence > self.judge_max_confidence:
            raise ValueError(
                f"judge_min_confidence ({self.judge_min_confidence}) must not exceed "
                f"judge_max_confidence ({self.judge_max_confidence})"
            )
        return self
