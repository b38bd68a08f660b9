"""The documentation's settings reference, generated from ``Settings`` by the site's hook
(docs/hooks/settings_ref.py): every setting is in it, under the variable name pydantic-settings
really reads, and the hand-written pages name no variable that is not a setting."""

from __future__ import annotations

import importlib.util
import re
import sys
import typing
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rag.settings import Settings
from rag.settings.sources import GROUPS

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


def test_every_setting_has_a_row_with_its_variable_and_description() -> None:
    rows = {row.path: row for row in ref.rows()}
    assert set(rows) == {
        f"{group}.{field}" for group, model in GROUPS.items() for field in model.model_fields
    }
    page = ref.render()
    for path, row in rows.items():
        group, field = path.split(".")
        assert row.env.startswith("RAGGUARD_") and f"`{row.env}`" in page, path
        assert f"## `{group}`" in page
        description = GROUPS[group].model_fields[field].description
        if description:
            assert ref._cell(description) in page, path


def test_the_reference_shows_type_default_bounds_and_old_names() -> None:
    rows = {row.path: row for row in ref.rows()}
    seqs = rows["engine.max_num_seqs"]
    assert (seqs.env, seqs.other_env) == ("RAGGUARD_MAX_NUM_SEQS", ["RAGGUARD_MAX_BATCH_SIZE"])
    assert seqs.type == "int, 1 ≤ x ≤ 1024" and seqs.default == "`32`"
    assert rows["retrieval.top_k"].default == "`4`"
    assert rows["engine.model"].default == "empty" and "(optional)" in rows["engine.model"].type
    assert rows["retrieval.mode"].env == "RAGGUARD_RETRIEVAL"


def _sample(info: Any) -> tuple[str, Any]:
    """A valid non-default value of a setting, as its variable is written, and as read."""
    annotation = str(info.annotation)
    default = info.get_default(call_default_factory=True)
    if "bool" in annotation:
        return ("false" if default else "true"), not default
    if "Literal" in annotation:
        choices = [c for c in typing.get_args(_plain(info.annotation)) if c != default]
        if choices:
            return str(choices[0]), choices[0]
    return "", None  # the value's text is checked by the type tests


def _plain(annotation: Any) -> Any:
    for arg in typing.get_args(annotation) or (annotation,):
        if typing.get_origin(arg) is typing.Literal:
            return arg
    return annotation


def test_each_variable_in_the_reference_is_read_into_its_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every documented and old name of every switch and choice sets that setting (and a few
    numbers and a JSON list), read from the environment as the server reads it."""
    checked = 0
    for row in ref.rows():
        group, field = row.path.split(".")
        info = GROUPS[group].model_fields[field]
        text, value = _sample(info)
        if not text:
            continue
        for env in [row.env, *row.other_env]:
            monkeypatch.setenv(env, text)
            settings = Settings(_env_file=None)
            assert getattr(getattr(settings, group), field) == value, env
            monkeypatch.delenv(env)
            checked += 1
    assert checked > 10
    for env, path, text, value in [
        ("RAGGUARD_TOP_K", "retrieval.top_k", "9", 9),
        ("RAGGUARD_MAX_BATCH_SIZE", "engine.max_num_seqs", "5", 5),
        ("RAGGUARD_MODEL_CACHE_DIR", "engine.cache_dir", "/tmp/x", Path("/tmp/x")),
        ("RAGGUARD_GUARDS", "guards.names", '["repetition"]', ["repetition"]),
        ("RAGGUARD_AUDIT_RATES", "policy.audit_rates", '{"docs": 0.5}', {"docs": 0.5}),
    ]:
        monkeypatch.setenv(env, text)
        group, field = path.split(".")
        assert getattr(getattr(Settings(_env_file=None), group), field) == value, env
        monkeypatch.delenv(env)


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
