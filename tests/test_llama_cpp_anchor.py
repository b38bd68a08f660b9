"""The llama.cpp anchor's bookkeeping (benchmarks/llama_cpp_anchor.py) with a stand-in for
llama-cpp-python, which CI never builds: every side does the same work, the ratios and the load
figure come out, and what cannot run says so."""

from __future__ import annotations

import types
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from benchmarks import llama_cpp_anchor as anchor
from engine import EngineConfig, LLMEngine
from engine.model_loader import load_config_and_tokenizer, resolve_model
from tests.engine.tiny_models import tiny_qwen2

pytestmark = pytest.mark.model  # builds engines (on a tiny random model, in seconds)


class FakeLlama:
    """``llama_cpp.Llama``'s surface the anchor uses: ``generate`` yields tokens until closed."""

    instances: ClassVar[list[FakeLlama]] = []

    def __init__(self, model_path: str, **options: object) -> None:
        self.model_path, self.options = model_path, options
        self.prompts: list[list[int]] = []
        self.resets = 0
        FakeLlama.instances.append(self)

    def reset(self) -> None:
        self.resets += 1

    def generate(self, tokens: list[int], **sampling: object) -> Iterator[int]:
        assert sampling == {"top_k": 1, "temp": 0.0, "repeat_penalty": 1.0}
        self.prompts.append(tokens)
        token = tokens[-1]
        while True:
            token = (token * 31 + 7) % 1000
            yield token


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    _, _, tokenizer, _ = load_config_and_tokenizer(resolve_model(None), None)
    directory = tmp_path_factory.mktemp("anchor") / "tiny"
    tiny_qwen2(directory, tokenizer, 0.0)
    return str(directory)


def _engine(model: str, prefix_caching: bool = True) -> LLMEngine:
    return LLMEngine(
        EngineConfig(
            model=model,
            device="cpu",
            kv_cache_memory_bytes=16 << 20,
            enable_prefix_caching=prefix_caching,
        )
    )


def test_every_side_does_the_same_work_and_the_load_is_measured(tiny: str) -> None:
    fake = types.SimpleNamespace(Llama=FakeLlama, __version__="fake")
    engines = {"float32": _engine(tiny), "other": _engine(tiny)}
    prompts = [list(range(10 + i, 40 + i)) for i in range(3)]
    decode_prompt = list(range(100, 130))
    n_ctx = anchor.context_size(decode_prompt, 6, prompts)
    assert n_ctx % 256 == 0 and n_ctx >= 30 + anchor.ANSWER_TOKENS
    figures = anchor.bench(
        anchor.LlamaCppAnchor(fake, Path("model.gguf"), 2, n_ctx),
        Path("model.gguf"),
        engines,
        decode_prompt,
        6,
        prompts,
        threads=2,
        repeats=1,
        load_engine=_engine(tiny, prefix_caching=False),
    )
    llama = FakeLlama.instances[-1]
    assert llama.model_path == "model.gguf" and llama.options["n_threads"] == 2
    # warm-up, one decode run and one run per answer, each prefilled from scratch
    assert llama.resets == len(llama.prompts) == 2 + len(prompts)
    assert figures["llama_cpp_version"] == "fake" and figures["answers"] == 3
    for side in ("float32", "other", "llama_cpp"):
        assert figures[f"{side}_decode_tokens_per_s"] > 0
        assert figures[f"{side}_answer_tokens_per_s"] > 0
    assert figures["other_over_llama_cpp_answer"] > 0
    assert figures["load_requests"] == anchor.LOAD_COPIES * len(prompts)
    assert figures["load_over_llama_cpp_one_at_a_time"] == pytest.approx(
        figures["load_tokens_per_s"] / figures["llama_cpp_answer_tokens_per_s"]
    )
    assert 0 <= figures["llama_cpp_identical_answer_prefix_share"] <= 1


def test_the_load_refuses_a_prefix_cached_engine_and_unknown_formats_are_named(tiny: str) -> None:
    with pytest.raises(ValueError, match="prefix cache off"):
        anchor.run_load(_engine(tiny), [[1, 2, 3]], [2])
    with pytest.raises(ValueError, match="unknown variants"):
        anchor.build_engines(tiny, ["int3"])


def test_what_cannot_run_says_why() -> None:
    assert "CPU anchor" in str(anchor.skip_reason("cuda", Path("m.gguf")))
    assert "not a GGUF" in str(anchor.skip_reason("cpu", None))
