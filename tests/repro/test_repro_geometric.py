"""The five geometric experiments (repro/platonic.py, sola.py, pace.py, spikenet.py, apt.py over repro/geometric.py):
how the budget and the tiny size map onto the presets, the table of means and spreads over seeds, the fresh
shapes clouds, and the checks that reject bad options before anything is written. Their SMOKE runs are the
experiment contract's (tests/repro/test_experiments.py)."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

from icml26zoo.configs import load_preset
from icml26zoo.models import build_model
from icml26zoo.repro import apt, geometric, pace, platonic, sola, spikenet
from icml26zoo.repro.common import Budget, Experiment, parameter_count
from icml26zoo.train.config import DataConfig

pytestmark = pytest.mark.usefixtures("fast_compile")  # tolerance and range checks only (tests/conftest.py)

MODULES = {"platonic": platonic, "sola": sola, "pace": pace, "spikenet": spikenet, "apt": apt}


def test_every_family_has_its_experiment_and_its_pages_presets():
    assert set(geometric.FAMILIES) == set(MODULES)
    for name, family in geometric.FAMILIES.items():
        assert MODULES[name].FAMILY is family and MODULES[name].FULL.seeds == (0, 1, 2)
        baseline = load_preset(family.baseline)
        assert baseline.model.name == "set_transformer"
        # The baseline preset differs from the model's only in the model (configs/geo_*_baseline.py).
        assert dataclasses.replace(baseline, model=load_preset(family.model).model) == load_preset(family.model)


@pytest.mark.parametrize("name", sorted(geometric.FAMILIES))
def test_cells_follow_the_budget_and_the_tiny_size(name, tmp_path):
    family, module = geometric.FAMILIES[name], MODULES[name]
    full = Experiment(tmp_path / "full", budget=module.FULL)
    for role, preset in (("model", family.model), ("baseline", family.baseline)):
        config = geometric.cell_base(family, role, full, tiny=False)
        # At FULL the models are the presets', the points per example the budget's seq_len (= the preset's).
        assert config.model == load_preset(preset).model
        assert config.data.data_dir == str(tmp_path / "full" / "data") and config.eval_every == 0
        options = dict(config.data.task_options)
        if family.points_option is not None:
            assert options[family.points_option] == module.FULL.seq_len == load_preset(preset).seq_len
    smoke = Experiment(tmp_path / "smoke", budget=module.SMOKE)
    for role in geometric.ROLES:
        config = geometric.cell_base(family, role, smoke, tiny=True)
        assert config.model.num_layers == 1 and config.optim.warmup_steps == 1
        if family.points_option is not None:
            assert dict(config.data.task_options)[family.points_option] == module.SMOKE.seq_len
        # Every tiny model builds (abstract shapes) and is far smaller than its preset.
        assert parameter_count(config.model) < parameter_count(load_preset(family.model).model) / 10


def test_rows_give_the_mean_spread_and_values_per_seed():
    family = geometric.FAMILIES["pace"]

    def trained(values):
        config = load_preset(family.model)
        return {"config": config, "params": 10,
                "summaries": [{"eval/accuracy": a, "eval/loss": 1 - a} for a in values]}

    rows, columns = geometric.family_rows(family, {"model": trained([0.5, 0.75]), "baseline": trained([0.25])},
                                          {"model": {"extra": [1.0, 3.0]}, "baseline": {"extra": [2.0]}})
    model, baseline = rows
    assert model["accuracy"] == 0.625 and model["accuracy_spread"] == 0.25
    assert model["accuracy_per_seed"] == "0.5000, 0.7500" and model["loss"] == 0.375
    assert model["extra"] == 2.0 and model["extra_spread"] == 2.0
    assert baseline["accuracy_spread"] is None and baseline["preset"] == family.baseline
    assert columns[:4] == ["role", "preset", "model", "params"] and "extra_per_seed" in columns
    regression, _ = geometric.family_rows(geometric.FAMILIES["sola"], {"model": {
        "config": load_preset("geo_sola_sphere"), "params": 1, "summaries": [{"eval/loss": 0.25}]}})
    assert regression[0]["relative_l2"] == 0.25 and "accuracy" not in regression[0]


def test_eval_sets_rotate_the_same_clouds():
    data = DataConfig(name="zoo_shapes", task_options=(("num_points", 16), ("num_shapes", 3)))
    sets = geometric.shapes_eval_sets(data, 6)
    (canonical, labels), (rotated, rotated_labels) = sets["canonical"], sets["rotated"]
    np.testing.assert_array_equal(labels, rotated_labels)
    np.testing.assert_allclose(np.linalg.norm(rotated, axis=-1), np.linalg.norm(canonical, axis=-1), atol=1e-5)
    assert np.max(np.abs(rotated - canonical)) > 0.1


@pytest.mark.parametrize(("name", "kwargs", "message"), [
    ("platonic", {"budget": Budget(steps=1, batch_size=1, seq_len=1), "tiny": "yes"},
     r"tiny must be True or False, got 'yes'"),
    ("pace", {"budget": Budget(steps=1, batch_size=1, seq_len=8)},
     r"budget.seq_len \(the points per row\) must be >= 16 for pace at the preset size, got 8"),
    ("apt", {"budget": Budget(steps=1, batch_size=1, seq_len=100)},
     r"budget.seq_len \(the points per row\) must be >= 224 for apt at the preset size, got 100"),
    ("apt", {"convergence_sizes": (64, 32)}, r"convergence_sizes must be strictly increasing"),
    ("apt", {"convergence_sizes": (16,)}, r"convergence_sizes\[i\] must be an integer >= 17, got 16"),
    ("apt", {"grid": 1}, r"grid must be an integer >= 2, got 1"),
    ("apt", {"meshes": 65}, r"meshes must be an integer in \[1, 64\], got 65"),
    ("spikenet", {"eval_clouds": 0}, r"eval_clouds must be an integer >= 1, got 0"),
    ("sola", {"roles": ("model", "model")}, r"roles must not repeat a name"),
])
def test_bad_options_raise_before_anything_is_written(name, kwargs, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        MODULES[name].run(tmp_path / "run", **kwargs)
    assert not (tmp_path / "run").exists()


def test_pace_cells_exercise_the_sketch(tmp_path):
    """The pace experiment's model has sketch rank r < N = 16 tokens at FULL and tiny sizes, so the forward
    with the objective's key draws a sketch in every block (PaceNet.layer_keys); at r >= N it would use the
    exact covariance, which check_sketch_exercised rejects."""
    family = geometric.FAMILIES["pace"]
    for budget, tiny in ((pace.FULL, False), (pace.SMOKE, True)):
        model_config = geometric.cell_base(family, "model", Experiment(tmp_path / str(tiny), budget=budget),
                                           tiny=tiny).model
        assert pace.check_sketch_exercised(model_config) < pace.NUM_PATCHES == budget.seq_len
        model = build_model(model_config, rngs=nnx.Rngs(0))
        keys = model.layer_keys(pace.NUM_PATCHES, jax.random.key(1))
        assert len(keys) == model_config.num_layers and all(key is not None for key in keys)
    exact = dataclasses.replace(model_config, model_options=(*model_config.model_options, ("sketch_rank", 16)))
    with pytest.raises(ValueError, match="sketch_rank < N = 16 tokens, got attention='pace', expand='sketch', "
                                         "sketch_rank=16"):
        pace.check_sketch_exercised(exact)


def test_pace_variants_change_one_model_option_of_the_preset(tmp_path):
    """Each pace variant is the pacenet preset's cell with the one option VARIANTS names (the page's exact-covariance,
    MSSA and TSSA rows); an unknown variant is refused before anything is written."""
    experiment = Experiment(tmp_path / "run", budget=pace.FULL)
    base = geometric.cell_base(geometric.FAMILIES["pace"], "model", experiment, tiny=False)
    for variant, changes in pace.VARIANTS.items():
        config = pace.variant_config(experiment, variant)
        assert dict(config.model.model_options) == dict(base.model.model_options) | dict(changes)
        assert dataclasses.replace(config, model=base.model) == base
    assert dict(pace.variant_config(experiment, "mssa").model.model_options)["attention"] == "mssa"
    with pytest.raises(ValueError, match="variants: unknown name 'crate'"):
        pace.run(tmp_path / "bad", budget=pace.SMOKE, tiny=True, variants=("crate",))
    assert not (tmp_path / "bad").exists()
