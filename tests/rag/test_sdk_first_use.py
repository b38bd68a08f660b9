"""The README's SDK example on a fresh machine: any working directory, no index built yet."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag import Pipeline, Settings
from rag.errors import IndexNotFoundError


def test_a_missing_index_fails_before_any_model_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rag.pipeline

    def no_loading(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was loaded for an index that does not exist")

    monkeypatch.setattr(rag.pipeline, "Embedder", no_loading)
    monkeypatch.setattr(rag.pipeline, "build_engine_client", no_loading)
    settings = Settings(index_name="handbook", index_dir=tmp_path / "ix", _env_file=None)
    with pytest.raises(IndexNotFoundError) as caught:
        Pipeline.from_settings(settings)
    message = str(caught.value)
    assert "'handbook'" in message and str((tmp_path / "ix").resolve()) in message
    assert "ragguard ingest FOLDER --index handbook" in message and "RAGGUARD_INDEX_DIR" in message


@pytest.mark.model
def test_the_readme_example_builds_the_demo_index_on_first_use_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # not the repository: no ./indexes yet
    pipeline = Pipeline.from_settings(Settings(index_name="demo", max_tokens=24, _env_file=None))
    try:
        assert pipeline.collections.get("demo").info().num_documents >= 20
        assert (tmp_path / "indexes" / "demo").is_dir()
        result = pipeline.ask("What does a KV cache avoid recomputing?", top_k=4)
        assert result.passages and result.passages[0].doc_id == "kv-cache.md"
    finally:
        pipeline.close()
