"""Our model is built from a checkpoint one decoder layer at a time (``from_checkpoint``): the
weights come out as transformers loads them, quantized layers never wait for the whole float
checkpoint, and a checkpoint that does not fit the model is a clear error."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest
import torch

from engine.layers.int4 import Int4Embedding, Int4Linear
from engine.layers.quantization import Int8Embedding, Int8Linear
from engine.model_loader import CheckpointTensors
from engine.models.llama import LlamaForCausalLM, fuse_projections


def _tiny_llama(
    directory: Path,
    *,
    tie: bool,
    safetensors: bool = True,
    legacy_bin: bool = False,
    rope: dict[str, object] | None = None,
) -> object:
    """A random 3-layer Llama saved in several shards; returns its transformers config."""
    from transformers import LlamaConfig
    from transformers import LlamaForCausalLM as HFLlama

    torch.manual_seed(0)
    config = LlamaConfig(
        rope_parameters=rope,
        vocab_size=96,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=tie,
    )
    model = HFLlama(config)
    model.save_pretrained(directory, max_shard_size="100KB")
    if not safetensors:  # transformers 5 writes safetensors only: the older format by hand
        for file in [*directory.glob("*.safetensors"), *directory.glob("*.index.json")]:
            file.unlink()
        torch.save(
            model.state_dict(),
            directory / "pytorch_model.bin",
            _use_new_zipfile_serialization=not legacy_bin,  # the pre-1.6 format: no mmap
        )
    return config


def _reference(directory: Path) -> dict[str, torch.Tensor]:
    from transformers import LlamaForCausalLM as HFLlama

    return fuse_projections(HFLlama.from_pretrained(directory).state_dict())


class _Spy:
    """A ``TensorSource`` that records what each read asked for."""

    def __init__(self, inner: CheckpointTensors) -> None:
        self.inner = inner
        self.reads: list[list[str]] = []

    def names(self) -> list[str]:
        return self.inner.names()

    def take(self, names: Iterable[str]) -> dict[str, torch.Tensor]:
        wanted = list(names)
        self.reads.append(wanted)
        return self.inner.take(wanted)


@pytest.mark.parametrize("tie", [True, False])
def test_float_weights_are_those_transformers_loads(tmp_path: Path, tie: bool) -> None:
    config = _tiny_llama(tmp_path, tie=tie)
    assert len(list(tmp_path.glob("*.safetensors"))) > 1  # the reads cross shards
    model = LlamaForCausalLM.from_checkpoint(
        config, CheckpointTensors(tmp_path), device="cpu", dtype=torch.float32
    )
    ours = model.state_dict()
    reference = _reference(tmp_path)
    for name, tensor in reference.items():
        assert torch.equal(ours[name], tensor), name
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tie
    assert not any(t.is_meta for t in [*model.parameters(), *model.buffers()])
    assert model.rotary.inv_freq.dtype == torch.float32


def test_a_scaled_rope_gets_the_reference_frequencies(tmp_path: Path) -> None:
    """The model is built on the meta device; transformers' scaled-rope functions must still
    compute real frequencies (llama3 scaling, as Llama 3.x checkpoints use)."""
    from transformers import LlamaForCausalLM as HFLlama

    rope = {
        "rope_type": "llama3",
        "rope_theta": 10000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32,
    }
    config = _tiny_llama(tmp_path, tie=True, rope=rope)
    model = LlamaForCausalLM.from_checkpoint(
        config, CheckpointTensors(tmp_path), device="cpu", dtype=torch.float32
    )
    reference = HFLlama.from_pretrained(tmp_path).model.rotary_emb.inv_freq
    assert not model.rotary.inv_freq.is_meta
    assert torch.equal(model.rotary.inv_freq, reference)
    assert not torch.equal(reference, 1.0 / (10000.0 ** (torch.arange(0, 16, 2).float() / 16)))


@pytest.mark.parametrize("legacy_bin", [False, True])
def test_pytorch_bin_checkpoints_load_too(tmp_path: Path, legacy_bin: bool) -> None:
    config = _tiny_llama(tmp_path, tie=False, safetensors=False, legacy_bin=legacy_bin)
    assert list(tmp_path.glob("pytorch_model*.bin")) and not list(tmp_path.glob("*.safetensors"))
    model = LlamaForCausalLM.from_checkpoint(
        config, CheckpointTensors(tmp_path), device="cpu", dtype=torch.bfloat16
    )
    ours = model.state_dict()["model.layers.2.mlp.down_proj.weight"]
    reference = _reference(tmp_path)["model.layers.2.mlp.down_proj.weight"]
    assert torch.equal(ours, reference.to(torch.bfloat16))


@pytest.mark.parametrize(
    ("quantization", "linear", "untied_embedding"),
    [("int8", Int8Linear, Int8Embedding), ("int4", Int4Linear, Int4Embedding)],
)
def test_each_layer_is_quantized_before_the_next_is_read(
    tmp_path: Path, quantization: str, linear: type, untied_embedding: type
) -> None:
    config = _tiny_llama(tmp_path, tie=False)
    spy = _Spy(CheckpointTensors(tmp_path))
    model = LlamaForCausalLM.from_checkpoint(
        config, spy, device="cpu", dtype=torch.float32, quantization=quantization
    )
    # One read per decoder layer, in order, then the final norm, then the two vocabulary-sized
    # matrices one at a time (the head quantized before the embedding is read).
    for index, read in enumerate(spy.reads[:3]):
        assert read and all(name.startswith(f"model.layers.{index}.") for name in read)
    assert spy.reads[3:] == [
        ["model.norm.weight"],
        ["lm_head.weight"],
        ["model.embed_tokens.weight"],
    ]
    # Every linear of every layer holds its quantized weights, equal to quantizing the float
    # layer afterwards; the head is int8 and the untied embedding in the layers' format.
    reference = _reference(tmp_path)
    for index, layer in enumerate(model.model.layers):
        for name in ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj"):
            module = layer.get_submodule(name)
            assert isinstance(module, linear), name
            weight = reference[f"model.layers.{index}.{name}.weight"]
            float_linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
            float_linear.weight.data = weight
            expected = (
                Int8Linear.from_linear(float_linear)
                if linear is Int8Linear
                else linear(float_linear)
            ).state_dict()
            got = module.state_dict()
            assert got.keys() == expected.keys(), name
            assert all(torch.equal(got[key], expected[key]) for key in got), name
    assert isinstance(model.lm_head, Int8Linear)
    assert isinstance(model.model.embed_tokens, untied_embedding)


def test_a_checkpoint_that_does_not_fit_is_a_clear_error(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    config = _tiny_llama(tmp_path, tie=False)
    (tmp_path / "zz-extra.safetensors").write_bytes(b"")
    save_file(
        {"model.layers.7.mlp.up_proj.weight": torch.zeros(2, 2)}, tmp_path / "zz-extra.safetensors"
    )
    spy = _Spy(CheckpointTensors(tmp_path))
    with pytest.raises(ValueError, match=r"unexpected \['model.layers.7"):
        LlamaForCausalLM.from_checkpoint(config, spy, device="cpu", dtype=torch.float32)
    assert spy.reads == []  # refused before a single layer was read

    (tmp_path / "zz-extra.safetensors").unlink()
    source = CheckpointTensors(tmp_path)
    source.take(["model.layers.1.post_attention_layernorm.weight"])  # gone from the checkpoint
    with pytest.raises(ValueError, match="missing.*layers.1.post_attention_layernorm"):
        LlamaForCausalLM.from_checkpoint(config, source, device="cpu", dtype=torch.float32)
    with pytest.raises(ValueError, match="quantization"):
        LlamaForCausalLM.from_checkpoint(
            config,
            CheckpointTensors(tmp_path),
            device="cpu",
            dtype=torch.float32,
            quantization="fp8",
        )


def test_a_tensor_is_read_once(tmp_path: Path) -> None:
    _tiny_llama(tmp_path, tie=True)
    source = CheckpointTensors(tmp_path)
    assert "model.norm.weight" in source.names()
    source.take(["model.norm.weight"])
    assert "model.norm.weight" not in source.names()
    with pytest.raises(KeyError, match="model.norm.weight"):
        source.take(["model.norm.weight"])
