"""Logging settings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from rag.settings.base import Group


class LoggingSettings(Group):
    """Server logs."""

    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    log_format: Literal["json", "text"] = Field(
        "json", description="server logs: one JSON object per line, or plain text"
    )
    log_text: bool = Field(
        False, description="put question and answer text in request logs (default: lengths only)"
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower_level(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value
