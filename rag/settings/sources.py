"""Where a setting's value comes from: the variable names each one is read under, and the
settings source that reads them (from the environment and the ``.env`` file) into the groups.

Every setting keeps the one flat name it always had, ``RAGGUARD_<FIELD>``, whichever group it
sits in; a few fields were renamed inside their group and keep their old variable (and old
keyword) as their name: ``ENV_NAMES`` lists them.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource
from pydantic_settings.exceptions import SettingsError

from rag.settings.base import Group
from rag.settings.engine import EngineSettings
from rag.settings.generation import GenerationSettings
from rag.settings.guards import GuardSettings
from rag.settings.logging import LoggingSettings
from rag.settings.policy import PolicySettings
from rag.settings.retrieval import RetrievalSettings
from rag.settings.review import ReviewSettings
from rag.settings.server import ServerSettings

PREFIX = "RAGGUARD_"

GROUPS: dict[str, type[Group]] = {
    "engine": EngineSettings,
    "retrieval": RetrievalSettings,
    "generation": GenerationSettings,
    "guards": GuardSettings,
    "policy": PolicySettings,
    "review": ReviewSettings,
    "server": ServerSettings,
    "logging": LoggingSettings,
}
"""The groups of ``Settings``, by their attribute name."""

ENV_NAMES: dict[tuple[str, str], tuple[str, ...]] = {
    ("engine", "cache_dir"): ("RAGGUARD_MODEL_CACHE_DIR",),
    ("engine", "process_nice"): ("RAGGUARD_ENGINE_PROCESS_NICE",),
    # RAGGUARD_MAX_BATCH_SIZE: the name before it followed the engine's; still read.
    ("engine", "max_num_seqs"): ("RAGGUARD_MAX_NUM_SEQS", "RAGGUARD_MAX_BATCH_SIZE"),
    ("retrieval", "mode"): ("RAGGUARD_RETRIEVAL",),
    ("guards", "names"): ("RAGGUARD_GUARDS",),
}
"""Fields whose variables are not simply ``RAGGUARD_<FIELD>``: the first name is documented,
the others are still read."""


def env_names(group: str, field: str) -> tuple[str, ...]:
    """The variables that set ``group.field``, the documented one first."""
    return ENV_NAMES.get((group, field), (PREFIX + field.upper(),))


def fields() -> Iterator[tuple[str, str, FieldInfo]]:
    """Every setting as ``(group, field, info)``, in the groups' order."""
    for group, model in GROUPS.items():
        for name, info in model.model_fields.items():
            yield group, name, info


KEYWORDS: dict[str, tuple[str, str]] = {
    name.removeprefix(PREFIX).lower(): (group, field)
    for group, field, _ in fields()
    for name in env_names(group, field)
}
"""A setting's flat keyword (``Settings(top_k=3)``: the variable's name without the prefix, in
lower case) and the group field it sets."""


def _is_complex(info: FieldInfo) -> bool:
    """Whether the field's variable holds JSON (a list or a mapping)."""
    annotation = info.annotation
    options = typing.get_args(annotation) if typing.get_origin(annotation) else ()
    candidates = [annotation, *options]
    return any(typing.get_origin(a) in (list, dict) or a in (list, dict) for a in candidates)


class GroupedVariables(PydanticBaseSettingsSource):
    """``RAGGUARD_<FIELD>`` variables, read case-insensitively from ``variables`` (the
    environment, or the ``.env`` file's entries) into ``{group: {field: value}}``."""

    def __init__(self, settings_cls: type[BaseSettings], variables: Mapping[str, str | None]):
        super().__init__(settings_cls)
        self.variables = {key.upper(): value for key, value in variables.items()}

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # everything is read in __call__

    def found(self) -> Iterator[tuple[str, str, str, str]]:
        """``(group, field, variable, raw value)`` of every setting the variables set."""
        for group, field, _ in fields():
            for name in env_names(group, field):
                value = self.variables.get(name)
                if value is not None:
                    yield group, field, name, value
                    break

    def __call__(self) -> dict[str, Any]:
        values: dict[str, dict[str, Any]] = {}
        for group, field, name, raw in self.found():
            value: Any = raw
            if _is_complex(GROUPS[group].model_fields[field]) and raw.strip():
                try:
                    value = json.loads(raw)
                except json.JSONDecodeError as exc:
                    raise SettingsError(f"{name} must be JSON: {exc}") from None
            values.setdefault(group, {})[field] = value
        return values


@dataclass(frozen=True, slots=True)
class SettingValue:
    """One setting's effective value and where it came from."""

    group: str
    field: str
    variable: str
    """The variable that set it, else its documented name."""
    value: Any
    """As JSON would hold it (a secret masked)."""
    source: Literal["default", "env", "file", "argument"]


def describe(
    settings: BaseModel,
    environ: Mapping[str, str],
    dotenv: Mapping[str, str | None],
) -> list[SettingValue]:
    """Every setting of ``settings`` with its source: the environment (``environ``), the
    ``.env`` file (``dotenv``: its entries), a keyword given in code (set, yet in neither), or
    its default."""
    from_env = {(g, f): n for g, f, n, _ in GroupedVariables(BaseSettings, environ).found()}
    from_file = {(g, f): n for g, f, n, _ in GroupedVariables(BaseSettings, dotenv).found()}
    rows = []
    for group, field, _ in fields():
        model = getattr(settings, group)
        value = model.model_dump(mode="json", include={field})[field]
        key = (group, field)
        source: Literal["default", "env", "file", "argument"]
        if key in from_env:
            source, variable = "env", from_env[key]
        elif key in from_file:
            source, variable = "file", from_file[key]
        else:
            variable = env_names(group, field)[0]
            source = "argument" if field in model.model_fields_set else "default"
        rows.append(SettingValue(group, field, variable, value, source))
    return rows
