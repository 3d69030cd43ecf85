"""TransformerConfig: defaults, validation messages (one line, naming the bad value), dict round trip."""

from __future__ import annotations

import dataclasses

import pytest

from interpret.errors import ConfigError
from interpret.reference import TransformerConfig


def _message(excinfo: pytest.ExceptionInfo[ConfigError]) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


def test_defaults_are_resolved() -> None:
    config = TransformerConfig(d_model=48, n_heads=6, n_layers=3)
    assert config.d_head == 8
    assert config.d_mlp == 4 * 48 == config.mlp_width
    assert config.n_decoder_layers == 3 == config.n_decoder_blocks
    assert config.scoring == "scaled_dot" and config.dropout == 0.0


def test_config_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        TransformerConfig().d_model = 64  # type: ignore[misc]


def test_d_model_not_divisible_by_heads() -> None:
    with pytest.raises(ConfigError) as excinfo:
        TransformerConfig(d_model=30, n_heads=4)
    message = _message(excinfo)
    assert "d_model=30" in message and "n_heads=4" in message
    assert "1, 2, 3, 5, 6" in message


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("positions", "rotary", "'sinusoidal', 'learned', 'none'"),
        ("scoring", "cosine", "'scaled_dot', 'dot', 'additive'"),
        ("activation", "swish", "'relu', 'gelu'"),
        ("pooling", "max", "'first', 'mean'"),
    ],
)
def test_unknown_choice_names_value_and_options(field: str, value: str, allowed: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        TransformerConfig(**{field: value})
    message = _message(excinfo)
    assert f"{field}={value!r}" in message and allowed in message


def test_typo_gets_a_suggestion() -> None:
    with pytest.raises(ConfigError) as excinfo:
        TransformerConfig(positions="learnd")
    assert "Did you mean 'learned'?" in _message(excinfo)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"n_layers": 0}, "n_layers=0"),
        ({"d_mlp": -3}, "d_mlp=-3"),
        ({"vocab_size": 0}, "vocab_size=0"),
        ({"window": -1}, "window=-1"),
        ({"dropout": 1.5}, "dropout=1.5"),
        ({"layer_norm_eps": 0.0}, "layer_norm_eps=0.0"),
    ],
)
def test_out_of_range_values(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        TransformerConfig(**kwargs)  # type: ignore[arg-type]
    assert needle in _message(excinfo)


def test_dict_round_trip_and_unknown_key() -> None:
    config = TransformerConfig(d_model=16, n_heads=2, vocab_size=10, window=2, scoring="additive")
    assert TransformerConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ConfigError) as excinfo:
        TransformerConfig.from_dict({"d_modl": 16})
    message = _message(excinfo)
    assert "'d_modl'" in message and "Did you mean 'd_model'?" in message
