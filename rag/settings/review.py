"""Review settings: the human review queue and the durable state beside it."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from rag.settings.base import Group


class ReviewSettings(Group):
    """The human review queue and the durable state beside it."""

    data_dir: Path = Field(Path("data"), description="review queue and other durable state")
    review_db: str | None = Field(
        None, description="review store: a SQLite path or postgresql:// URL; empty = data_dir"
    )
    review_claim_ttl_s: float = Field(
        900.0, gt=0, description="how long a reviewer's claim on an item lasts"
    )
    review_sla_s: float = Field(
        24 * 3600.0, gt=0, description="time from queueing to an item's deadline"
    )
    review_gold_rate: float = Field(
        0.1, ge=0.0, lt=1.0, description="share of the queue made of gold items (known answers)"
    )
    review_min_ratings: int = Field(
        0,
        ge=0,
        le=10,
        description="hand resolved items to further reviewers until each has this many ratings "
        "(0: off; the seed's quality control asks for 3)",
    )
    review_gold_file: Path | None = Field(
        None, description="JSONL of gold items: {question, answer, correct}"
    )
