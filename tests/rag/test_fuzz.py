"""API fuzzing: schemathesis generates requests from the app's own OpenAPI schema (valid ones and
invalid ones) and sends them in-process to the real app, with the real models and the demo index.
Any 5xx, any status code the schema does not document, and any response body that does not match
its documented schema fails the test; the one 5xx allowed is the documented 504 of a request whose
own deadline (``timeout_s``) passed.

The fuzzer calls one app for the whole run (its state builds up as a server's does) as an admin
with an API key, so that creating keys cannot lock it out; revoking keys
(``DELETE /v1/keys/{name}``) is left out, as revoking its own key would. The schema it explores is
a copy with lower generation limits (``FAST``, ``MAX_ITEMS``), so that a run stays within minutes
on a CPU, and with the served model ids (``MODELS``); every other bound is the app's own. The run
is deterministic (fixed seed).

Run alone: ``pytest tests/rag/test_fuzz.py -s`` (the summary line gives the figures).
"""

from __future__ import annotations

import copy
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import schemathesis
from fastapi import FastAPI
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)

from rag.pipeline import Pipeline
from rag.server import create_app
from rag.server.auth import KeyStore, Role
from rag.settings import Settings

if TYPE_CHECKING:
    from engine import LLMEngine
    from rag.retrieval.embed import Embedder

MAX_EXAMPLES = 40
"""Random examples per operation (the examples and coverage phases add their own cases)."""
SEED = 20240615

FAST = {"max_tokens": 4, "max_completion_tokens": 4, "n": 2, "best_of": 2}
"""Integer fields whose generated values are capped in the fuzzer's copy of the schema: the
model generates at most 4 tokens per completion, 2 completions per prompt."""
MAX_ITEMS = {"prompt": 2, "messages": 3}
MODELS = ["SmolLM2-135M-Instruct", "ragguard"]
"""The model ids served (the test models'): the copy names them, so that valid requests reach
the model instead of a 404 for an unknown id."""

TALLY: Counter[str] = Counter()


def _cap(schema: Any) -> None:
    """Lower the generation limits of ``FAST`` and ``MAX_ITEMS`` throughout ``schema``."""
    if isinstance(schema, list):
        for item in schema:
            _cap(item)
        return
    if not isinstance(schema, dict):
        return
    for name, prop in schema.get("properties", {}).items():
        for branch in prop.get("anyOf", [prop]):
            if name in FAST and branch.get("type") == "integer":
                branch["maximum"] = FAST[name]
            if name in MAX_ITEMS and branch.get("type") == "array":
                branch["maxItems"] = MAX_ITEMS[name]
            if name == "model" and branch.get("type") == "string":
                branch["enum"] = MODELS
    for value in schema.values():
        _cap(value)


def _fuzzed_schema() -> Any:
    """The app's OpenAPI schema, capped; only the routes are built for it (nothing loads)."""
    raw = copy.deepcopy(create_app(Settings(_env_file=None)).openapi())
    _cap(raw)
    config = schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "generation": {"max-examples": MAX_EXAMPLES, "database": "none", "deterministic": True},
        }
    )
    schema = schemathesis.openapi.from_dict(raw, config=config)
    return schema.exclude(method="DELETE", path="/v1/keys/{name}")


fuzzed = _fuzzed_schema()


@pytest.fixture(scope="module")
def target(
    embedder: Embedder,
    llm_engine: LLMEngine,
    demo_index_template: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[FastAPI, dict[str, str]]]:
    """The app over a fresh copy of the demo index, and the admin's headers."""
    root: Path = tmp_path_factory.mktemp("fuzz")
    settings = Settings(
        index_dir=root / "indexes", data_dir=root / "data", max_tokens=4, _env_file=None
    )
    shutil.copytree(demo_index_template, settings.retrieval.index_dir / "demo")
    keys = KeyStore(settings.review.data_dir / "keys.sqlite")
    admin_key = keys.create("fuzzer", Role.ADMIN)
    keys.close()
    pipeline = Pipeline(settings, embedder, llm_engine)
    assert pipeline.engine.model_name in MODELS
    TALLY.clear()
    yield create_app(pipeline=pipeline), {"authorization": f"Bearer {admin_key}"}
    asgi.shutdown_lifespans()  # the app's lifespan, started by the fuzzer's first request
    pipeline.close()
    five = sum(n for status, n in TALLY.items() if status.startswith("5"))
    print(
        f"\nAPI fuzzing: {TALLY.total()} cases, 5xx: {five} (504 past the request's own "
        f"deadline: {TALLY['deadline']}), by status: "
        + ", ".join(f"{s}: {n}" for s, n in sorted(TALLY.items()) if s != "deadline")
    )


def _past_own_deadline(case: Any, response: Any) -> bool:
    """A 504 for a request that set ``timeout_s`` and was not answered within it."""
    if response.status_code != 504 or "timeout_s" not in (case.body or {}):
        return False
    error = response.json().get("error")
    code = error.get("code") if isinstance(error, dict) else error  # OpenAI's shape or ours
    return bool(code == "deadline_exceeded")


@pytest.mark.slow
@fuzzed.parametrize()
def test_the_api_answers_every_generated_request_as_documented(
    case: Any, target: tuple[FastAPI, dict[str, str]]
) -> None:
    app, headers = target
    response = case.call(app=app, headers=headers)
    TALLY[str(response.status_code)] += 1
    checks = [status_code_conformance, response_schema_conformance]
    if _past_own_deadline(case, response):
        TALLY["deadline"] += 1
    else:
        checks.append(schemathesis.checks.not_a_server_error)
    case.validate_response(response, checks=checks, headers=headers)
