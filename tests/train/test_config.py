"""Presets load, overrides parse by type, and bad values raise ValueError naming the field."""

import pathlib

import pytest

from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig, apply_overrides, load_preset

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
    assert config.model.option("qk_norm") is True


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.norm_placement=middle", "norm_placement must be one of"),
        ("model.num_heads=3", "num_heads must be a multiple of num_kv_heads"),
        ("optim.learning_rate=-1", "optim.learning_rate must be a positive number"),
        ("optim.b2=1.5", "optim.b2 must lie in"),
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
