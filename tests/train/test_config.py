"""Presets load, overrides parse by type, and bad values raise ValueError naming the field."""

import dataclasses
import json
import pathlib

import pytest

from icml26zoo.configs import load_preset
from icml26zoo.configs import names as preset_names
from icml26zoo.mixers.attention import AttentionOptions
from icml26zoo.mixers.base import mixer_options
from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import (
    DataConfig,
    OptimConfig,
    TrainConfig,
    apply_overrides,
    check_config,
)
from icml26zoo.train.config_checks import check_fits_data
from icml26zoo.train.errors import RunError

PRESETS = sorted(p for p in pathlib.Path(__file__).resolve().parents[2].joinpath("configs").glob("*.py")
                 if p.name != "__init__.py")


def test_there_are_presets():
    names = {p.stem for p in PRESETS}
    assert {"default", "llama_tiny"} <= names


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_every_preset_loads(path):
    config = load_preset(path)
    assert isinstance(config, TrainConfig)
    assert config.model.vocab_size >= 1


def test_overrides_parse_nested_fields_by_type():
    config = apply_overrides(
        TrainConfig(),
        ["model.num_layers=3", "optim.learning_rate=2e-4", "data.name=mqar", "tensorboard=false",
         "model.head_dim=None", "model.mixer_options=(('qk_norm', True),)"],
    )
    assert config.model.num_layers == 3
    assert config.optim.learning_rate == pytest.approx(2e-4)
    assert config.data.name == "mqar"
    assert config.tensorboard is False
    assert config.model.head_dim is None
    assert mixer_options(config.model, "attention", AttentionOptions).qk_norm is True


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.norm_placement=middle", "norm_placement must be one of"),
        ("model.num_heads=3", "num_heads must be a multiple of num_kv_heads"),
        ("optim.learning_rate=-1", "optim.learning_rate must be a positive number"),
        ("optim.b2=1.5", "optim.b2 must be a number in .0, 1), got 1.5"),
        ("batch_size=0", "batch_size must be an integer >= 1"),
        ("data.name=imagenet", "data.name must be one of"),
        ("model.num_layers=two", "'model.num_layers' expects int"),
        ("model.depth=2", "unknown config field 'model.depth'"),
        ("tensorboard=maybe", "expects a bool"),
        ("no_equals_sign", "key=value"),
    ],
)
def test_bad_overrides_name_the_field(override, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        apply_overrides(TrainConfig(), [override])


def test_configs_are_frozen():
    with pytest.raises(AttributeError):
        TrainConfig().batch_size = 3  # type: ignore[misc]


def test_bad_constructor_values():
    with pytest.raises(ValueError, match="compute_dtype"):
        ModelConfig(compute_dtype="float16")
    with pytest.raises(ValueError, match="grad_accum_steps"):
        OptimConfig(grad_accum_steps=0)
    with pytest.raises(ValueError, match="mqar_num_pairs"):
        DataConfig(mqar_num_pairs=0)


def test_missing_preset_file(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_preset(tmp_path / "nope.py")
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\n")
    with pytest.raises(ValueError, match="get_config"):
        load_preset(bad)


def test_two_gradient_optimizers_reject_gradient_accumulation():
    from icml26zoo.train.optim import build_optimizer, custom_update

    with pytest.raises(ValueError, match="optim.grad_accum_steps must be 1 for optim.name='sam_polyak'"):
        build_optimizer(OptimConfig(name="sam_polyak", grad_accum_steps=2), num_steps=10)
    assert custom_update(OptimConfig(name="sam_polyak")) is not None
    assert custom_update(OptimConfig(name="adamw")) is None


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_every_preset_round_trips_through_json_and_loads_by_name(path):
    config = load_preset(path)
    assert load_preset(path.stem) == config
    assert TrainConfig.from_json(config.to_json()) == config
    # The form config.json was written in before to_json: dataclasses.asdict dumped with default=str.
    assert TrainConfig.from_json(json.dumps(dataclasses.asdict(config), default=str)) == config


def test_json_round_trip_keeps_nested_tuples_none_and_types():
    config = apply_overrides(TrainConfig(), [
        "model.mixer=mamba2", "model.mixer_options=(('decay', 'diagonal'), ('state_size', 8))", "model.head_dim=None",
        "optim.options=()", "distributed=None", "data.data_dir=/tmp/x", "optim.learning_rate=1e-3",
    ])
    back = TrainConfig.from_json(config.to_json())
    assert back == config
    assert back.model.mixer_options == (("decay", "diagonal"), ("state_size", 8))
    assert back.model.head_dim is None and back.distributed is None
    assert isinstance(back.model, ModelConfig) and isinstance(back.data, DataConfig)
    assert TrainConfig.from_dict({}) == TrainConfig()
    with pytest.raises(RunError, match=r"unknown config field 'model.depth'; ModelConfig has \["):
        TrainConfig.from_dict({"model": {"depth": 2}})
    with pytest.raises(RunError, match="config model must be a JSON object, got 3"):
        TrainConfig.from_dict({"model": 3})


def test_preset_names_and_unknown_names():
    assert {"default", "llama_tiny", "classify_tiny"} <= set(preset_names())
    assert "__init__" not in preset_names()
    first = ", ".join(preset_names()[:2])  # the list grows with every preset: check its sorted start
    with pytest.raises(RunError, match=r"'lama_tiny' is not a preset name or a file \(did you mean 'llama_tiny'\?\); "
                                       rf"presets: {first},"):
        load_preset("lama_tiny")


@pytest.mark.parametrize("build, message", [
    (lambda: OptimConfig(learning_rate=float("inf")), "optim.learning_rate must be finite, got inf"),
    (lambda: OptimConfig(options=(("rho", float("nan")),)), r"optim.options must be finite, got \(\('rho', nan\),\)"),
    (lambda: DataConfig(topics_signal=float("nan")), "data.topics_signal must be finite"),
    (lambda: TrainConfig(sample_temperature=float("inf")), "sample_temperature must be finite"),
    (lambda: check_config(TrainConfig(model=ModelConfig(rope_theta=float("inf")))), "model.rope_theta must be finite"),
    (lambda: apply_overrides(TrainConfig(), ["model.norm_eps=1e999"]), "'model.norm_eps' expects a finite float"),
])
def test_infinite_and_nan_numbers_are_rejected(build, message):
    with pytest.raises(ValueError, match=message):
        build()


@pytest.mark.parametrize("overrides, message", [
    (["model.mixer=foxx"], "model.mixer must be one of ['attention',"),
    (["model.mixer_options=(('expand', 0),)"], "model.mixer_options: mamba mixer option 'expand' must be an integer"),
    (["optim.options=(('rho', 0.1),)"], "optim.options: unknown adamw optimizer option 'rho'"),
    (["optim.name=sam_polyak", "optim.grad_accum_steps=2"], "optim.grad_accum_steps must be 1 for optim.name="),
])
def test_names_and_options_are_checked_when_the_config_is_built(overrides, message):
    with pytest.raises(RunError) as info:
        apply_overrides(load_preset("mamba_mqar"), overrides)
    assert str(info.value).startswith(message), info.value


@pytest.mark.parametrize("overrides, message", [
    (["seq_len=8"], "seq_len must be >= 4 * data.mqar_num_pairs - 1 = 15"),
    (["model.vocab_size=32"], "model.vocab_size must be at least the dataset's vocabulary (33)"),
])
def test_vocab_and_row_length_are_checked_against_the_dataset(overrides, message):
    config = apply_overrides(load_preset("mamba_mqar"), overrides)
    with pytest.raises(ValueError) as info:
        check_fits_data(config)
    assert str(info.value).startswith(message), info.value


@pytest.mark.parametrize(("override", "field", "close"), [
    ("model.mixer=foxx", "model.mixer", "fox"), ("optim.name=adamww", "optim.name", "adamw"),
    ("data.name=mqr", "data.name", "mqar"), ("objective=lmm", "objective", "lm"),
])
def test_a_misspelt_registered_name_gets_a_suggestion(override, field, close):
    with pytest.raises(ValueError, match=rf"^{field} must be one of \[.*\], got '\w+' \(did you mean '{close}'\?\)$"):
        apply_overrides(load_preset("llama_tiny"), [override])
