from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from engine import EngineConfig, ModelNotFoundError, SamplingParams
from engine.model_loader import converted_gguf_dir, default_model_path, resolve_model
from tests.engine.reference import hf_generate

if TYPE_CHECKING:
    from engine.hf_generator import HFGenerator


def test_default_resolves_to_the_embedded_gguf() -> None:
    source = resolve_model(None)
    assert source.gguf_file == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert (Path(source.directory) / source.gguf_file).is_file()


def test_explicit_gguf_path_resolves() -> None:
    path = default_model_path()
    source = resolve_model(str(path))
    assert source.gguf_file == path.name and source.directory == str(path.parent)


def test_missing_model_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="hub"):
        resolve_model("someone/some-model")
    with pytest.raises(ModelNotFoundError, match=r"not a \.gguf"):
        (tmp_path / "weights.bin").write_bytes(b"x")
        resolve_model(str(tmp_path / "weights.bin"))
    with pytest.raises(ModelNotFoundError, match="config.json"):
        resolve_model(str(tmp_path))


def test_gguf_is_converted_once_to_a_cached_safetensors_copy(
    generator: HFGenerator, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine import model_loader

    converted = converted_gguf_dir(generator.source, generator.config.cache_dir)
    assert (converted / "config.json").is_file()
    assert list(converted.glob("*.safetensors"))

    def no_conversion(*args: object) -> None:
        raise AssertionError("the cached conversion should have been used")

    monkeypatch.setattr(model_loader, "_convert_gguf", no_conversion)
    model, tokenizer = model_loader.load_model_and_tokenizer(
        generator.source, device="cpu", dtype="float32"
    )
    assert (
        model.config.num_hidden_layers == 30
        and tokenizer.eos_token == generator.tokenizer.eos_token
    )


def test_a_hugging_face_model_directory_loads_and_generates(
    tmp_path: Path, generator: HFGenerator
) -> None:
    """Any HF directory works: a tiny random Llama saved with the default model's tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from engine.hf_generator import HFGenerator

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(generator.tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=generator.tokenizer.bos_token_id,
        eos_token_id=generator.tokenizer.eos_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(tmp_path / "tiny")
    generator.tokenizer.save_pretrained(tmp_path / "tiny")
    tiny = HFGenerator(EngineConfig(model=str(tmp_path / "tiny"), device="cpu"))
    assert tiny.model_name == "tiny" and tiny.max_model_len == 256
    out = tiny.generate(["hello world"], SamplingParams(max_tokens=5))[0]
    ids = torch.tensor([out.prompt_token_ids])
    reference = hf_generate(tiny.model, ids, max_new_tokens=5, do_sample=False)[
        0, ids.shape[1] :
    ].tolist()
    completion = out.outputs[0]
    assert completion.token_ids == reference[: len(completion.token_ids)]
    assert (
        len(completion.token_ids) == 5 or reference[len(completion.token_ids)] in tiny.eos_token_ids
    )
    assert len(completion.logprobs) == len(completion.token_ids)
