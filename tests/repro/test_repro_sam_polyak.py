"""The SAM-Polyak reproduction: bad inputs, that each cell's config wires the trainer to exactly the optimizer it
names (constant step, no clipping), and the tuned-rate selection. The SMOKE experiment runs in the experiment
contract (tests/repro/test_experiments.py) and the notebook test (tests/test_notebooks.py)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from icml26zoo.optim import sam as sp
from icml26zoo.repro import sam_polyak
from icml26zoo.repro.common import Budget, Experiment
from icml26zoo.train.optim import build_optimizer, custom_update

TINY = Budget(steps=20, batch_size=2, seq_len=8, seeds=(0,))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"optimizers": ("sam", "adamw")}, "optimizers: unknown name 'adamw'"),
        ({"optimizers": ()}, "optimizers must name at least one"),
        ({"rho": -0.01}, r"rho \(the SAM radius\) must be a finite non-negative number, got -0.01"),
        ({"rho": math.nan}, "rho"),
        ({"sam_learning_rates": (0.1, 0.0)}, r"sam_learning_rates\[i\] must be a finite positive number, got 0.0"),
        ({"sam_learning_rates": (-0.1,)}, "sam_learning_rates"),
        ({"sam_learning_rates": ()}, "sam_learning_rates must hold at least one"),
        ({"sam_learning_rates": (0.1, 0.1)}, "must not repeat"),
        ({"polyak_cap": 0.0}, r"polyak_cap \(the Polyak step cap γ_b\) must be a finite positive number, got 0.0"),
        ({"polyak_cap": math.inf}, "polyak_cap"),
        ({"polyak_cap": True}, "polyak_cap"),
        ({"probe_batches": 0}, "probe_batches"),
    ],
)
def test_bad_arguments_raise_naming_the_field(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        sam_polyak.run(tmp_path / "run", budget=TINY, **kwargs)
    assert not (tmp_path / "run").exists()  # rejected before anything is written


def _loss(params, batch):
    x, y = batch
    return 0.5 * jnp.mean((x @ params["w"] - y) ** 2)


@pytest.mark.parametrize("name", ["sam", "sam_polyak"])
def test_cell_config_trains_with_the_named_optimizer_at_a_constant_step(tmp_path, name):
    # The cell's config, built into the trainer's optimizer and update, must take the same step as the zoo's
    # SAM / SAM-Polyak step with the same ρ and step size, late in the run too (constant schedule, no clipping).
    experiment = Experiment(tmp_path / "run", budget=TINY)
    lr, rho = 0.3, 0.1
    config = experiment.cell_config(sam_polyak._method_config(sam_polyak._base_config(experiment), name, lr, rho))
    assert config.data.topics_length == TINY.seq_len + 1 and config.data.data_dir.startswith(str(tmp_path))
    tx, update = build_optimizer(config.optim, config.num_steps), custom_update(config.optim)
    reference = sp.sam_sgd(lr) if name == "sam" else sp.sam_polyak(lr)
    ref_step = sp.sam_step if name == "sam" else sp.sam_polyak_step
    x = jax.random.normal(jax.random.PRNGKey(0), (16, 6))
    batch = (x, 10.0 * x @ jnp.arange(1.0, 7.0))  # large gradients: any clipping would show
    params = {"w": jnp.zeros(6)}
    state, ref_state = tx.init(params), reference.init(params)
    ref_params = params
    with jax.numpy_dtype_promotion("standard"):
        for _ in range(TINY.steps):
            _, _, updates, state = update(_loss, params, batch, state, tx)
            params = optax.apply_updates(params, updates)
            ref_params, ref_state, _ = ref_step(_loss, reference, ref_params, batch, ref_state, rho=rho)
    np.testing.assert_allclose(params["w"], ref_params["w"], rtol=1e-5)
    assert float(_loss(params, batch)) < float(_loss({"w": jnp.zeros(6)}, batch))


def _outcome(eval_loss, losses=(3.0, 2.0, 1.0)):
    return ({"eval/loss": eval_loss, "eval/accuracy": 0.5}, (list(range(0, 10 * len(losses), 10)), list(losses)))


def test_tuned_learning_rate_is_the_lowest_finite_eval_loss_and_never_polyak():
    outcomes = {("sam_polyak", 1.0): [_outcome(0.1)], ("sam", 0.01): [_outcome(0.9), _outcome(0.7)],
                ("sam", 0.1): [_outcome(0.5), _outcome(0.6)], ("sam", 1.0): [_outcome(math.nan), _outcome(0.1)]}
    assert sam_polyak._tuned(outcomes) == ("sam", 0.1)
    rows = [sam_polyak._row(n, lr, p, ("sam", 0.1)) for (n, lr), p in outcomes.items()]
    assert [r["tuned"] for r in rows] == ["untuned", "", "best of sweep", ""]
    assert rows[2]["eval_loss"] == pytest.approx(0.55) and rows[2]["eval_loss_spread"] == pytest.approx(0.05)
    assert sam_polyak._tuned({("sam", 1.0): [_outcome(math.nan)]}) is None
    assert rows[0]["polyak_step_end"] is None and rows[1]["capped_end"] is None


def test_row_reports_the_median_probe_step_and_the_capped_fraction_over_all_seeds():
    seed0, seed1 = _outcome(0.2), _outcome(0.3)
    seed0[0]["polyak_steps"], seed1[0]["polyak_steps"] = [0.1, 2.0, 0.3], [1.0, 0.2, 0.4]
    row = sam_polyak._row("sam_polyak", 1.0, [seed0, seed1], None)
    assert row["polyak_step_end"] == pytest.approx(0.35) and row["capped_end"] == pytest.approx(2 / 6)


def test_final_train_loss_averages_the_last_fifth_of_the_run():
    steps = list(range(0, 101, 10))
    losses = [float(s) for s in steps]
    assert sam_polyak._final_train_loss((steps, losses)) == pytest.approx(90.0)  # steps 80, 90, 100
    assert math.isnan(sam_polyak._final_train_loss(([], [])))
