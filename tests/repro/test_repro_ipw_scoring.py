"""The IPW scoring-rule reproduction: bad inputs, the ATE estimators against hand-computed values, the synthetic
data's propensity model, and a tiny end-to-end run whose rows follow from its per-seed estimates. The command
line, its one-line errors and resume are the experiment contract's (tests/repro/test_experiments.py)."""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26zoo.repro import ipw_scoring
from icml26zoo.repro.common import Budget

TINY = Budget(steps=3, batch_size=40, seq_len=2, seeds=(0, 1))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"methods": ("log_loss", "hinge")}, "methods: unknown name 'hinge'"),
        ({"methods": ()}, "methods must name at least one"),
        ({"strengths": ()}, "strengths must hold at least one"),
        ({"strengths": (2.5, -1.0)}, r"strengths\[i\] must be a finite positive number, got -1.0"),
        ({"strengths": (math.nan,)}, "strengths"),
        ({"strengths": (1.0, 1.0)}, "must not repeat"),
        ({"q_min": 0.0}, r"q_min .* must be a number in \(0, 0.5\), got 0.0"),
        ({"q_min": 0.5}, "q_min"),
        ({"q_min": True}, "q_min"),
        ({"budget": Budget(steps=3, batch_size=10, seq_len=2, seeds=(0, 1))}, "budget.batch_size"),
        ({"budget": Budget(steps=3, batch_size=40, seq_len=2, seeds=(0,))}, "at least 2 data sets"),
    ],
)
def test_bad_arguments_raise_naming_the_field(tmp_path, kwargs, match):
    kwargs = {"budget": TINY, **kwargs}
    with pytest.raises(ValueError, match=match):
        ipw_scoring.run(tmp_path / "run", **kwargs)
    assert not (tmp_path / "run").exists()  # rejected before anything is written


def test_ate_estimates_match_hand_computed_horvitz_thompson_and_hajek_values():
    q = jnp.asarray([0.5, 0.25, 0.8, 0.0001])  # the last one is clipped to q_min = 0.01
    t = jnp.asarray([1.0, 0.0, 1.0, 1.0])
    y = jnp.asarray([2.0, 1.0, 4.0, 3.0])
    p = jnp.asarray([0.5, 0.5, 0.5, 0.5])
    got = ipw_scoring.ate_estimates(q, t, y, p, q_min=0.01)
    treated_w, control_w = np.array([2.0, 0.0, 1.25, 100.0]), np.array([0.0, 4 / 3, 0.0, 0.0])
    y_np = np.asarray(y)
    np.testing.assert_allclose(got["ipw"], np.mean(treated_w * y_np - control_w * y_np), rtol=1e-6)
    hajek = np.sum(treated_w * y_np) / np.sum(treated_w) - np.sum(control_w * y_np) / np.sum(control_w)
    np.testing.assert_allclose(got["hajek"], hajek, rtol=1e-6)
    weights = treated_w + control_w
    np.testing.assert_allclose(got["ess"], weights.sum() ** 2 / (weights**2).sum() / 4, rtol=1e-6)
    np.testing.assert_allclose(got["max_weight"], 100.0, rtol=1e-6)
    clipped = np.array([0.5, 0.25, 0.8, 0.01])
    error = np.mean(0.5 * (1 / clipped - 2) ** 2 + 0.5 * (1 / (1 - clipped) - 2) ** 2)
    np.testing.assert_allclose(got["weight_error"], error, rtol=1e-6)
    exact = ipw_scoring.ate_estimates(p, t, y, p, q_min=0.01)
    assert float(exact["weight_error"]) == 0.0 and float(exact["ess"]) == 1.0  # equal weights


def test_synthetic_data_follows_the_specified_propensity_and_outcome_model():
    data = ipw_scoring.make_data(jax.random.key(0), 20_000, 4, 2.5)
    x, p, t, y = (np.asarray(data[k], np.float64) for k in ("x", "p", "t", "y"))
    np.testing.assert_allclose(p, 1 / (1 + np.exp(-2.5 * x.sum(1) / 2)), rtol=1e-5)
    assert set(np.unique(t)) == {0.0, 1.0} and abs(t.mean() - p.mean()) < 0.01
    residual = y - x.sum(1) - ipw_scoring.TAU * t
    assert abs(residual.mean()) < 0.03 and abs(residual.std() - 1.0) < 0.03
    assert abs(np.corrcoef(residual, p)[0, 1]) < 0.03  # noise independent of the propensity


def test_tiny_run_writes_the_table_figures_and_per_seed_estimates(tmp_path):
    results = ipw_scoring.run(tmp_path / "run", budget=TINY, methods=("ipw_canonical",),
                              strengths=(2.5,))
    assert [row["method"] for row in results.rows] == ["true_propensity", "naive", "ipw_canonical"]
    for name in ("markdown", "json", "ate", "weights"):
        assert results.paths[name].is_file()
    record = json.loads(results.paths["json"].read_text())
    per_seed = record["extra"]["per_seed"]
    fitted = per_seed["2.5/ipw_canonical"]
    assert len(fitted["ipw"]) == 2 and all(np.isfinite(fitted["train_loss"]))
    for row in results.rows:
        ipw = np.asarray(per_seed[f"2.5/{row['method']}"]["ipw"])
        np.testing.assert_allclose(row["ipw_bias"], ipw.mean() - ipw_scoring.TAU, rtol=1e-6)
        np.testing.assert_allclose(row["ipw_rmse"], np.sqrt(np.mean((ipw - ipw_scoring.TAU) ** 2)), rtol=1e-6)
    assert results.rows[1]["ess_fraction"] == 1.0 and results.rows[1]["max_weight"] is None
    assert "| 2.5 | ipw_canonical |" in results.markdown
