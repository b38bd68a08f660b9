from __future__ import annotations

from typing import Any

import pytest

from engine import PRESETS, SamplingParams


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("n", 0),
        ("temperature", -0.1),
        ("temperature", 7.0),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("top_k", -1),
        ("min_p", 1.2),
        ("max_tokens", 0),
        ("repetition_penalty", 0.0),
        ("presence_penalty", 3.0),
        ("frequency_penalty", -2.5),
        ("no_repeat_ngram_size", -1),
        ("logprobs", 50),
        ("truncate_prompt_tokens", 0),
    ],
)
def test_invalid_values_raise_value_error_naming_the_field(field: str, value: float) -> None:
    kwargs: dict[str, Any] = {field: value}
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kwargs)


def test_empty_stop_string_rejected() -> None:
    with pytest.raises(ValueError, match="stop"):
        SamplingParams(stop=[""])


def test_single_stop_string_becomes_a_list() -> None:
    # A lone string is accepted at run time, beyond the declared list[str].
    assert SamplingParams(stop="\n").stop == ["\n"]  # type: ignore[arg-type]


def test_presets_carry_the_seed_articles_values() -> None:
    creative = SamplingParams.creative()
    assert (creative.temperature, creative.top_p, creative.frequency_penalty) == (0.9, 0.95, 0.2)
    technical = SamplingParams.technical()
    assert (technical.temperature, technical.top_k, technical.presence_penalty) == (0.3, 40, 0.1)
    dialogue = SamplingParams.dialogue()
    assert (dialogue.temperature, dialogue.top_p, dialogue.repetition_penalty) == (0.7, 0.9, 1.1)
    assert SamplingParams.greedy().is_greedy


def test_from_preset_with_overrides_and_unknown_name() -> None:
    for name in PRESETS:
        assert SamplingParams.from_preset(name, max_tokens=7).max_tokens == 7
    with pytest.raises(ValueError, match="unknown sampling preset"):
        SamplingParams.from_preset("poetic")


def test_overrides_are_validated() -> None:
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams.creative(temperature=-1)
