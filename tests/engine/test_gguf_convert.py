"""The tensor-by-tensor GGUF conversion gives the weights transformers itself would load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from engine import gguf_convert, model_loader
from engine.model_loader import (
    ModelSource,
    converted_gguf_dir,
    load_state_dict,
    local_model_dir,
    resolve_model,
)

CONFIG_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
    "rope_parameters",
    "tie_word_embeddings",
    "eos_token_id",
    "bos_token_id",
    "model_type",
    "architectures",
)


@pytest.mark.slow  # 45 s on 2 cores; the default tier stays under 10 minutes
def test_default_model_matches_the_whole_model_transformers_conversion(tmp_path: Path) -> None:
    """Bitwise the weights (and the config) the old from_pretrained + save_pretrained wrote."""
    from transformers import AutoConfig, AutoModelForCausalLM

    source = resolve_model(None)
    directory = Path(local_model_dir(source, cache_dir=tmp_path))
    new = load_state_dict(directory)

    old_model = AutoModelForCausalLM.from_pretrained(
        source.directory, gguf_file=source.gguf_file, dtype="float32"
    )
    old = old_model.state_dict()
    assert set(new) <= set(old)
    assert set(old) - set(new) <= {"lm_head.weight"}  # tied: not stored, re-tied on load
    unequal = [name for name in new if not torch.equal(new[name], old[name])]
    assert not unequal, f"tensors differ from transformers' conversion: {unequal[:5]}"
    assert all(tensor.dtype == torch.float32 for tensor in new.values())

    config = json.loads((directory / "config.json").read_text())
    old_config = old_model.config.to_dict()
    old_config["architectures"] = [type(old_model).__name__]
    for key in CONFIG_FIELDS:
        assert config[key] == old_config[key], key
    assert "quantization_config" not in config and config["tie_word_embeddings"] is True
    assert AutoConfig.from_pretrained(directory).num_hidden_layers == 30
    assert (directory / "generation_config.json").is_file()
    assert (directory / "tokenizer.json").is_file()


# A tiny random Llama written as a GGUF (llama.cpp's layout), so the result is known exactly.


def _llama_cpp_permute(weights: torch.Tensor, n_head: int) -> torch.Tensor:
    """The Q/K row order llama.cpp's converter writes (rotary halves interleaved per head)."""
    rows = weights.shape[0]
    return (
        weights.reshape(n_head, 2, rows // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def _copy_tokenizer_fields(writer: Any, reader: Any) -> None:
    """The shipped model's tokenizer metadata, so transformers can build a tokenizer."""
    from gguf import GGUFValueType

    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        main = field.types[0]
        sub = field.types[-1] if main == GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), main, sub)


def _write_tiny_gguf(path: Path, *, tied: bool) -> dict[str, torch.Tensor]:
    """A 2-layer Llama as GGUF (matrices f16, norms f32); returns the HF weights it encodes."""
    import gguf
    from transformers import LlamaConfig, LlamaForCausalLM

    shipped = resolve_model(None)
    assert shipped.gguf_file is not None
    reader = gguf.GGUFReader(Path(shipped.directory) / shipped.gguf_file)
    vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    heads, kv_heads, layers = 4, 2, 2
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        tie_word_embeddings=tied,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    expected = {
        name: (tensor.half().float() if tensor.ndim == 2 else tensor.clone())
        for name, tensor in model.state_dict().items()
        if not (tied and name == "lm_head.weight")
    }
    for tensor in expected.values():
        if tensor.ndim == 1:  # norms: make them differ from 1 so a mix-up shows
            tensor.add_(torch.randn_like(tensor) * 0.1)

    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(layers)
    writer.add_context_length(256)
    writer.add_embedding_length(64)
    writer.add_feed_forward_length(128)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(64 // heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    _copy_tokenizer_fields(writer, reader)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, layers)
    for hf_name, tensor in expected.items():
        base, suffix = hf_name.rsplit(".", 1)
        gguf_name = f"{names.get_name(base)}.{suffix}"
        data = tensor
        if ".attn_q." in gguf_name:
            data = _llama_cpp_permute(tensor, heads)
        elif ".attn_k." in gguf_name:
            data = _llama_cpp_permute(tensor, kv_heads)
        array = data.numpy().astype(np.float16 if tensor.ndim == 2 else np.float32)
        writer.add_tensor(gguf_name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return expected


@pytest.mark.slow  # 23 s each on 2 cores
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_tiny_gguf_converts_to_shards_that_both_loaders_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tied: bool
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    expected = _write_tiny_gguf(tmp_path / "tiny.gguf", tied=tied)
    limit = 100_000  # several layers per shard; the 12 MB embedding gets its own
    monkeypatch.setattr(gguf_convert, "MAX_SHARD_BYTES", limit)
    source = ModelSource("tiny", str(tmp_path), gguf_file="tiny.gguf")
    directory = Path(local_model_dir(source, cache_dir=tmp_path / "cache"))

    index = json.loads((directory / "model.safetensors.index.json").read_text())
    shards = sorted(directory.glob("model-*-of-*.safetensors"))
    assert len(shards) > 2 and not (directory / "model.safetensors").exists()
    assert {directory / f for f in index["weight_map"].values()} == set(shards)
    assert set(index["weight_map"]) == set(expected)
    assert index["metadata"]["total_size"] == sum(t.numel() * 4 for t in expected.values())
    assert not list(directory.glob("*.partial"))

    ours = load_state_dict(directory)
    assert set(ours) == set(expected)
    assert all(torch.equal(ours[name], expected[name]) for name in expected)

    config = json.loads((directory / "config.json").read_text())
    assert config["tie_word_embeddings"] is tied
    assert config["architectures"] == ["LlamaForCausalLM"]
    model = AutoModelForCausalLM.from_pretrained(directory, dtype="float32")
    loaded = model.state_dict()
    assert all(torch.equal(loaded[name], expected[name]) for name in expected)
    lm_head = expected["model.embed_tokens.weight" if tied else "lm_head.weight"]
    assert torch.equal(model.lm_head.weight, lm_head)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    assert tokenizer("hello world").input_ids


def test_a_failed_conversion_leaves_no_cache_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = resolve_model(None)

    def fail(gguf_path: Path, target: Path) -> None:
        (target / "model.safetensors").write_bytes(b"half")
        raise RuntimeError("disk full")

    monkeypatch.setattr(gguf_convert, "write_converted_gguf", fail)
    with pytest.raises(RuntimeError, match="disk full"):
        local_model_dir(source, cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_another_process_finishing_first_wins_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = resolve_model(None)
    target = converted_gguf_dir(source, tmp_path)

    def race(gguf_path: Path, tmp: Path) -> None:
        (tmp / "config.json").write_text("{}")
        target.mkdir(parents=True)
        (target / "config.json").write_text('{"winner": true}')

    monkeypatch.setattr(gguf_convert, "write_converted_gguf", race)
    model_loader._convert_gguf(source, target)
    assert json.loads((target / "config.json").read_text()) == {"winner": True}
    assert list(tmp_path.iterdir()) == [target]


def test_architectures_on_transformers_newer_gguf_path_are_refused() -> None:
    """For those, from_pretrained bypasses the TensorProcessors our conversion reuses."""
    from engine.errors import ModelLoadError

    gguf_convert._check_legacy_architecture("llama")
    gguf_convert._check_legacy_architecture("qwen2")
    with pytest.raises(ModelLoadError, match="qwen35"):
        gguf_convert._check_legacy_architecture("qwen35")
