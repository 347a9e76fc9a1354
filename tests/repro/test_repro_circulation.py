"""The circulation reproduction: argument checks, the α = 1 sharing the grid relies on, and the figures. The
SMOKE run itself runs in the experiment contract (tests/repro/test_experiments.py: the notebook at SMOKE, its
outputs, resume through the command line)."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

from icml26zoo.mixers.circulation import CirculationAttention
from icml26zoo.models import ModelConfig
from icml26zoo.repro import circulation
from icml26zoo.repro.circulation_parts import MEASURES, loss_figure, measures_figure


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"alphas": ()}, "alphas must hold at least one"),
        ({"alphas": (1.0, float("nan"))}, r"alphas: each value must be a finite number, got nan"),
        ({"alphas": (1.0, "1.2")}, "alphas: each value must be a finite number"),
        ({"alphas": (1.2, 1.2)}, "alphas must not repeat"),
        ({"betas": (1.0, -0.5)}, r"betas: each value must be >= 0, got -0.5"),
        ({"measure_points": 0}, "measure_points must be an integer >= 1, got 0"),
        ({"measure_points": 25}, r"measure_points must be an integer in \[1, 24\], got 25"),
        ({"measure_rows": 65}, r"measure_rows must be an integer in \[1, 64\], got 65"),
    ],
)
def test_bad_arguments_raise_naming_them_before_anything_is_written(tmp_path, kwargs, match):
    run_dir = tmp_path / "run"
    with pytest.raises(ValueError, match=match):
        circulation.run(run_dir, budget=circulation.QUICK, **kwargs)
    assert not run_dir.exists()


def test_alpha_one_is_the_baseline_for_every_beta():
    """Why the grid trains α = 1 once: with c₂ = 0, H_α = H_org, so any β gives the β = 1 output."""
    cfg = ModelConfig(mixer="circulation", vocab_size=64, d_model=32, num_layers=1, num_heads=4, num_kv_heads=2,
                      max_seq_len=16)
    x = jax.random.normal(jax.random.key(0), (2, 8, 32))
    outputs = []
    for beta in (1.0, 3.0, 0.0):
        mixer = CirculationAttention(dataclasses.replace(cfg, mixer_options=(("alpha", 1.0), ("beta", beta))),
                                     rngs=nnx.Rngs(0))
        outputs.append(np.asarray(mixer(x)[0]))
    for other in outputs[1:]:
        np.testing.assert_allclose(other, outputs[0], atol=2e-5, rtol=2e-5)
    assert circulation._settings((0.9, 1.0), (1.0, 3.0)) == [(1.0, 1.0), (0.9, 1.0), (0.9, 3.0)]


def _cell(alpha, beta, seed, bpb, energy):
    layers = [{name: [energy + layer, energy + layer + 1.0] for name in MEASURES} for layer in range(2)]
    return {"cell": f"a{alpha:g}_b{beta:g}_s{seed}", "alpha": alpha, "beta": beta, "seed": seed,
            "bits_per_byte": bpb, "steps": [0, 10], "layers": layers}


def test_figures_average_seeds_and_share_the_baseline():
    trained = {(1.0, 1.0): [_cell(1.0, 1.0, 0, 4.0, -2.0), _cell(1.0, 1.0, 1, 4.2, -4.0)],
               (1.2, 3.0): [_cell(1.2, 3.0, 0, 4.5, -1.0), _cell(1.2, 3.0, 1, 4.5, -1.0)]}
    measures = measures_figure(trained)
    assert len(measures.axes) == 8  # 4 plotted measures x 2 layers
    baseline_line = measures.axes[0].get_lines()[0]
    np.testing.assert_allclose(baseline_line.get_ydata(), [-3.0, -2.0])  # layer 0 energy, mean of the seeds
    loss = loss_figure((1.0, 1.2), (3.0,), trained)
    xs, ys = loss.axes[0].get_lines()[0].get_data()
    np.testing.assert_allclose(np.asarray(xs, float), [1.0, 1.2])
    np.testing.assert_allclose(np.asarray(ys, float), [4.1, 4.5])  # α = 1 at β = 3 reads the β = 1 baseline cell
