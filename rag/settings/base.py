"""What every group of settings shares."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Group(BaseModel):
    """A group of settings (one concern). Its fields are read from ``RAGGUARD_<FIELD>``
    (``rag.settings.env_names``), checked as they are assigned, and unknown names are errors."""

    model_config = ConfigDict(validate_assignment=True, extra="forbid")


def empty_is_none(value: object) -> object:
    """An empty value (``RAGGUARD_MAX_QUEUE_WAIT_S=``) or "none" turns the setting off."""
    if isinstance(value, str) and value.strip().lower() in ("", "none"):
        return None
    return value
