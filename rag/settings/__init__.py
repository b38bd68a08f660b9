"""All configuration, read from ``RAGGUARD_*`` environment variables (or a ``.env`` file).

``Settings`` holds one group per concern (``settings.engine``, ``.retrieval``, ``.generation``,
``.guards``, ``.policy``, ``.review``, ``.server``, ``.logging``); each setting keeps its flat
variable, ``RAGGUARD_<FIELD>`` (``rag.settings.sources``), and its flat keyword:
``Settings(top_k=3)`` sets ``settings.retrieval.top_k``. ``ragguard config`` prints every value
and where it came from.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from rag.prompt import system_prompt_for
from rag.settings.base import Group
from rag.settings.engine import EngineSettings
from rag.settings.generation import GenerationSettings
from rag.settings.guards import GuardSettings
from rag.settings.logging import LoggingSettings
from rag.settings.policy import PolicySettings
from rag.settings.retrieval import RetrievalSettings
from rag.settings.review import ReviewSettings
from rag.settings.server import MAX_QUESTION_CHARS, ServerSettings
from rag.settings.sources import GROUPS, KEYWORDS, PREFIX, GroupedVariables, env_names

JUDGE_BY_DEFAULT = frozenset({"qwen2.5-coder-1.5b"})
"""Generator profiles that judge their own uncertain answers unless told otherwise."""


class Settings(BaseSettings):
    """ragguard settings: built in ``create_app`` or ``Pipeline.from_settings``, never at import."""

    model_config = SettingsConfigDict(env_prefix="RAGGUARD_", env_file=".env", extra="forbid")

    engine: EngineSettings = Field(default_factory=EngineSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    generation: GenerationSettings = Field(default_factory=GenerationSettings)
    guards: GuardSettings = Field(default_factory=GuardSettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    review: ReviewSettings = Field(default_factory=ReviewSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)

    def __init__(self, **values: Any) -> None:
        """``values``: groups (``engine=EngineSettings(...)`` or a mapping of its fields), or
        settings by their flat keywords (``top_k=3``, as ``RAGGUARD_TOP_K``), or pydantic-settings'
        own (``_env_file=None``: no ``.env`` file). An unknown keyword is an error."""
        super().__init__(**values)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keywords first, then the environment, then the ``.env`` file: each setting by its
        flat variable name, whichever group holds it."""
        dotenv = getattr(dotenv_settings, "env_vars", {})
        return (
            init_settings,
            GroupedVariables(settings_cls, dict(os.environ)),
            GroupedVariables(settings_cls, dotenv),
        )

    @model_validator(mode="before")
    @classmethod
    def _flat_keywords(cls, data: Any) -> Any:
        """``top_k=3`` (a setting's flat keyword) into ``retrieval={"top_k": 3}``; a keyword
        wins over the environment's value for the same setting."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for key in list(data):
            if key in GROUPS and isinstance(data[key], dict | Group):
                continue
            if key in KEYWORDS:
                group, field = KEYWORDS[key]
                given = data.get(group, {})
                values = dict(given) if isinstance(given, dict | Group) else {}
                values[field] = data.pop(key)
                data[group] = values
        return data

    def updated(self, **changes: Any) -> Settings:
        """A copy with ``changes`` (flat keywords: ``updated(top_k=3)``) applied to their
        groups, validated as an assignment is."""
        groups: dict[str, Group] = {}
        for key, value in changes.items():
            group, field = _keyword(key)
            copy = groups.setdefault(group, getattr(self, group).model_copy())
            setattr(copy, field, value)
        return self.model_copy(update=groups)

    def get(self, keyword: str) -> Any:
        """A setting's value by its flat keyword (``get("top_k")``)."""
        group, field = _keyword(keyword)
        return getattr(getattr(self, group), field)

    def was_given(self, keyword: str) -> bool:
        """Whether the setting was set (keyword, environment, file), not left at its default."""
        group, field = _keyword(keyword)
        return field in getattr(self, group).model_fields_set

    def flat(self, *, mode: Literal["python", "json"] = "python") -> dict[str, Any]:
        """Every setting by its flat keyword (one mapping, as ``RAGGUARD_*`` names them)."""
        values: dict[str, Any] = {}
        for group in GROUPS:
            dumped = getattr(self, group).model_dump(mode=mode)
            for field, value in dumped.items():
                values[env_names(group, field)[0].removeprefix(PREFIX).lower()] = value
        return values

    def effective_system_prompt(self) -> str:
        """The rule the generator answers by: ``system_prompt``, else the model's default
        (resolved when asked, so a copy with another ``model`` gets that model's)."""
        prompt = self.generation.system_prompt
        return prompt if prompt.strip() else system_prompt_for(self.engine.model)

    def resolved_judge_model(self) -> str | None:
        """The judge's model: None (off), "generator" (the generator's own engine) or a model
        for a second engine."""
        choice = (self.guards.judge_model or "").strip()
        if not choice:
            return "generator" if self.engine.model in JUDGE_BY_DEFAULT else None
        if choice.lower() in ("off", "none"):
            return None
        if choice == "generator" or choice == self.engine.model:
            return "generator"
        return choice

    def keys_location(self) -> str | Path:
        """Where the API key store lives (``keys_db``, else ``data_dir/keys.sqlite``)."""
        return self.server.keys_db or self.review.data_dir / "keys.sqlite"


def _keyword(keyword: str) -> tuple[str, str]:
    try:
        return KEYWORDS[keyword]
    except KeyError:
        raise ValueError(f"no setting is called {keyword!r}") from None


__all__ = [
    "JUDGE_BY_DEFAULT",
    "MAX_QUESTION_CHARS",
    "EngineSettings",
    "GenerationSettings",
    "GuardSettings",
    "LoggingSettings",
    "PolicySettings",
    "RetrievalSettings",
    "ReviewSettings",
    "ServerSettings",
    "Settings",
    "env_names",
]
