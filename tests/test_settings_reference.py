"""The documentation's settings reference, generated from ``Settings`` by the site's hook
(docs/hooks/settings_ref.py): every setting is in it, under the variable name pydantic-settings
really reads, and the hand-written pages name no variable that is not a setting."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic import AliasChoices, BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from rag.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
HOOK = ROOT / "docs" / "hooks" / "settings_ref.py"
# Variables the pages may name that are not settings: a switch of the test suite's own.
NOT_SETTINGS = {"RAGGUARD_UPDATE_SCREENSHOT"}
# Measured figures keep the settings they were measured with, gone ones included.
RECORDS = {"benchmarks.md"}


def _load_hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ragguard_docs_settings_ref", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


ref = _load_hook()


def _field_paths(model: type[BaseModel], path: str = "") -> list[str]:
    """Every field of ``model``, nested groups' fields by their dotted path."""
    paths = []
    for name, info in model.model_fields.items():
        dotted = f"{path}.{name}" if path else name
        paths.append(dotted)
        sub = ref._model_of(info.annotation)
        if sub is not None:
            paths += _field_paths(sub, dotted)
    return paths


def _get(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def test_every_setting_has_a_row_with_its_variable_and_description() -> None:
    rows = {row.path: row for row in ref.rows()}
    assert set(_field_paths(Settings)) == set(rows)
    page = ref.render()
    for path, row in rows.items():
        assert row.env.startswith("RAGGUARD_") and f"`{row.env}`" in page, path
        description = Settings.model_fields[path].description if "." not in path else None
        if description:
            assert ref._cell(description) in page, path


def test_the_reference_shows_type_default_bounds_and_old_names() -> None:
    rows = {row.path: row for row in ref.rows()}
    seqs = rows["max_num_seqs"]
    assert (seqs.env, seqs.other_env) == ("RAGGUARD_MAX_NUM_SEQS", ["RAGGUARD_MAX_BATCH_SIZE"])
    assert seqs.type == "int, 1 ≤ x ≤ 1024" and seqs.default == "`32`"
    assert rows["top_k"].default == "`4`"
    assert rows["model"].default == "empty" and "(optional)" in rows["model"].type


class _Engine(BaseModel):
    """The engine's group."""

    model: str = Field("m", description="the model")
    old_name: str = Field("o", validation_alias=AliasChoices("old_name", "legacy"))


class _Server(BaseSettings):
    """A group that reads its own variables."""

    model_config = SettingsConfigDict(env_prefix="RGS_")
    host: str = "h"


class _Nested(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RG_", env_nested_delimiter="__")
    plain: str = "p"
    renamed: str = Field("r", validation_alias=AliasChoices("RG_RENAMED", "RG_OLD_RENAMED"))
    engine: _Engine = Field(default_factory=_Engine)
    server: _Server = Field(default_factory=_Server)


class _Json(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RG_")
    engine: _Engine = Field(default_factory=_Engine)


@pytest.mark.parametrize("settings", [_Nested, _Json])
def test_each_name_in_the_reference_is_read_by_pydantic_settings(
    settings: type[BaseSettings], monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [row for row in ref.rows(settings) if row.type == "str"]
    assert {row.path for row in rows} == {
        path for path in _field_paths(settings) if path not in ("engine", "server")
    }
    for row in rows:
        for env in [row.env, *row.other_env]:
            value = f"set-by-{env}"
            if "→" in env:  # a key of a JSON variable
                variable, key = re.findall(r"`([^`]+)`", env)
                monkeypatch.setenv(variable, json.dumps({key: value}))
            else:
                variable = env
                monkeypatch.setenv(variable, value)
            assert _get(settings(_env_file=None), row.path) == value, env
            monkeypatch.delenv(variable)


def test_nested_groups_get_sections_of_their_own() -> None:
    page = ref.render(_Nested)
    assert "## `engine`" in page and "The engine's group." in page
    assert (
        "`RG_ENGINE__MODEL`" in page and "`RG_ENGINE__OLD_NAME` (also `RG_ENGINE__LEGACY`)" in page
    )
    assert "`RGS_HOST`" in page and "`RG_RENAMED` (also `RG_OLD_RENAMED`)" in page


def test_the_pages_name_only_variables_that_are_settings() -> None:
    known = {name for row in ref.rows() for name in [row.env, *row.other_env]} | NOT_SETTINGS
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    unknown = {
        f"{page.name}: {name}"
        for page in pages
        if page.name not in RECORDS
        for name in re.findall(r"RAGGUARD_[A-Z0-9_]*[A-Z0-9]", page.read_text())
        if name not in known
    }
    assert not unknown, sorted(unknown)
