"""Routing diagnostics (zoo.moe.diagnostics) against closed forms: balanced and collapsed loads, independent
and twin experts' co-selection, and the flattened metric names (the trainer's loss plot draws them:
tests/train/test_objective_diagnostics.py)."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from icml26zoo.moe.diagnostics import diagnostics_metrics, routing_diagnostics
from icml26zoo.moe.mahalanobis import independent_statistics, selection_statistics


def _aux(load, cooccurrence):
    layers = load.shape[0]
    return {"load": load, "cooccurrence": cooccurrence, "router_entropy": jnp.full((layers,), 0.5),
            "dropped": jnp.zeros((layers,))}


def test_balanced_and_collapsed_loads_and_coselection():
    experts = 4
    balanced, collapsed = jnp.full((experts,), 0.25), jnp.asarray([1.0, 0.0, 0.0, 0.0])
    _, independent = independent_statistics(experts, 2)
    picks = jnp.asarray([[0, 1]] * 10 + [[2, 3]] * 10, jnp.int32)
    _, twins = selection_statistics(picks, jnp.ones(20, jnp.bool_), experts)
    diagnostics = routing_diagnostics(_aux(jnp.stack([balanced, collapsed]), jnp.stack([independent, twins])))
    np.testing.assert_allclose(diagnostics["load_entropy"], [math.log(4), 0.0], atol=1e-6)
    np.testing.assert_allclose(diagnostics["collapse"], [0.0, 1.0], atol=1e-6)
    np.testing.assert_allclose(diagnostics["max_load_ratio"], [1.0, 4.0], atol=1e-6)
    # Twins: experts 0/1 and 2/3 always together (phi 1), across pairs never (phi -1): mean |phi| = 1.
    np.testing.assert_allclose(diagnostics["coselection"], [0.0, 1.0], atol=1e-5)

    metrics = diagnostics_metrics(diagnostics)
    assert metrics["moe/collapse"] == 0.5 and metrics["moe/layer1/collapse"] == 1.0
    assert metrics["moe/layer0/load/3"] == 0.25 and metrics["moe/router_entropy"] == 0.5
