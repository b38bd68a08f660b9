"""Which engine backend the settings build: ``generator=auto`` (the default) is the engine in its
own process in the API server, where health checks must not wait behind its steps, and in a
thread elsewhere."""

from __future__ import annotations

from rag.settings import Settings


def test_auto_runs_the_engine_in_its_own_process_only_in_the_server() -> None:
    auto = Settings(_env_file=None)
    assert auto.engine.generator == "auto"
    assert auto.engine.generator_backend(serving=True) == "engine-process"
    assert auto.engine.generator_backend() == "engine"
    chosen = Settings(generator="engine", _env_file=None)
    assert chosen.engine.generator_backend(serving=True) == "engine"
