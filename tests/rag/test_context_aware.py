"""Context-aware decoding through the pipeline: the generate stage hands the engine the same
question without its passages, and the engine contrasts the two prompts token by token."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest

from engine import LLMEngine, SamplingParams
from rag.pipeline import Pipeline
from rag.retrieval.embed import Embedder
from rag.settings import Settings


@pytest.mark.model
def test_the_pipeline_answers_with_context_aware_decoding(
    tmp_path: Path, embedder: Embedder, demo_index_template: Path
) -> None:
    settings = Settings(
        index_dir=tmp_path / "indexes",
        data_dir=tmp_path / "data",
        max_tokens=32,
        num_candidates=1,
        decoding="context_aware",
        _env_file=None,
    )
    config = dataclasses.replace(
        settings.engine.engine_config(), device="cpu", kv_cache_memory_bytes=64 << 20
    )
    assert config.decoding == "context_aware"
    engine = LLMEngine(config)
    sent: list[tuple[Any, SamplingParams]] = []
    add_request = engine.add_request

    def record(prompt: Any, params: SamplingParams, *args: Any, **kwargs: Any) -> str:
        sent.append((prompt, params))
        return add_request(prompt, params, *args, **kwargs)

    engine.add_request = record  # type: ignore[method-assign]
    shutil.copytree(demo_index_template, settings.retrieval.index_dir / "demo")
    pipeline = Pipeline(settings, embedder, engine)
    try:
        question = "What does a KV cache avoid recomputing?"
        result = pipeline.ask(question)
    finally:
        pipeline.close()
    prompt, params = next((p, s) for p, s in sent if s.context_free_prompt is not None)
    free = params.context_free_prompt
    assert isinstance(free, str) and question in free and "Passages:\n\n" in free
    assert free not in prompt and question in prompt  # the real prompt has its passages
    engine.add_request = add_request  # type: ignore[method-assign]
    again = engine.generate([prompt], dataclasses.replace(params, stop_check=None))[0]
    # The answer as generated (before the guards decide on it) is that context-aware decoding.
    assert result.samples[0].text.strip() == again.outputs[0].text.strip()
    plain = engine.generate([prompt], SamplingParams(max_tokens=32))[0].outputs[0]
    assert plain.text.strip() != again.outputs[0].text.strip()


def test_two_model_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="needs our engine"):
        Settings(decoding="context_aware", generator="hf", _env_file=None)
    with pytest.raises(ValueError, match="exclude each other"):
        Settings(decoding="context_aware", speculative="prompt_lookup", _env_file=None)
    with pytest.raises(ValueError, match="needs draft_model"):
        Settings(speculative="draft", _env_file=None)
    with pytest.raises(ValueError, match="needs amateur_model"):
        Settings(decoding="contrastive", _env_file=None)
    config = Settings(
        speculative="draft", draft_model="qwen2.5-coder-0.5b", _env_file=None
    ).engine.engine_config()
    assert (config.speculative, config.draft_model) == ("draft", "qwen2.5-coder-0.5b")


@pytest.mark.parametrize(
    ("value", "expected"), [("", None), ("none", None), ("int8", "int8"), ("same", "w8a8")]
)
def test_the_draft_quantization_setting_reaches_the_draft(
    value: str, expected: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGGUARD_DRAFT_QUANTIZATION", value)
    config = Settings(
        quantization="w8a8", speculative="draft", draft_model="x", _env_file=None
    ).engine.engine_config()
    assert (config.quantization, config.draft_config().quantization) == ("w8a8", expected)
    monkeypatch.setenv("RAGGUARD_DRAFT_QUANTIZATION", "int3")
    with pytest.raises(ValueError, match="draft_quantization"):
        Settings(_env_file=None)
