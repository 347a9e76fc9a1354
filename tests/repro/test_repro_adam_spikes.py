"""Adam loss-spike reproduction: bad inputs, the traced predictor against the analytic curvature of a 1-D
quadratic (and the loss rising exactly when it exceeds 2/η), and the stage detector on a synthetic trace."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from icml26zoo.repro import adam_spikes
from icml26zoo.repro import adam_spikes_parts as parts
from icml26zoo.repro.common import Budget

TINY = Budget(steps=3, batch_size=4, seq_len=2, seeds=(0,))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"settings": ("cnn",)}, r"settings: unknown name 'cnn'; expected one of \['quadratic', 'mlp'\]"),
    ({"settings": ()}, r"settings must name at least one"),
    ({"b2": 1.0}, r"b2 .* must be a number in \(0, 1\), got 1.0"),
    ({"eps": -1e-8}, r"eps must be a number in \(0, 1\), got -1e-08"),
    ({"noise": 0.0}, r"noise .* must be a finite positive number, got 0.0"),
    ({"quadratic_lr": float("nan")}, r"quadratic_lr must be a finite positive number, got nan"),
    ({"mlp_lr": 0}, r"mlp_lr must be a finite positive number, got 0"),
    ({"power_iters": 0}, r"power_iters must be an integer >= 1, got 0"),
    ({"spike_factor": 1.0}, r"spike_factor .* must be a number in \(1, inf\), got 1.0"),
    ({"budget": Budget(steps=3, batch_size=129, seq_len=2)}, r"budget.batch_size .* must be <= 128 rows, got 129"),
    ({"budget": Budget(steps=3, batch_size=4, seq_len=2000)}, r"budget.seq_len .* must be <= 1024, got 2000"),
])
def test_bad_arguments_raise_naming_them(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        adam_spikes.run(tmp_path / "run", **({"budget": TINY} | kwargs))
    assert not (tmp_path / "run").exists()


def test_traced_predictor_is_the_analytic_curvature_and_flags_exactly_the_loss_rises():
    # 1-D, noiseless: λ_dir = λ_max = h / (√v̂ + ε), and θ_(t+1) = (1 − η λ_dir) θ_t, so the loss rises iff
    # η λ_dir > 2. β2 = 0.9 lets v̂ decay past 2/η within 300 steps before θ underflows float32.
    eta, b2, eps, h = 0.1, 0.9, 1e-8, 0.1  # geomspace(0.1, 1, 1): one curvature, h = 0.1
    problem = parts.diagonal_quadratic(dim=1, noise=0.0, learning_rate=eta)
    record = parts.trace(problem, steps=300, b2=b2, eps=eps, power_iters=2, key=jax.random.PRNGKey(0))
    v_hat = record["v_max"] / (1 - b2 ** np.arange(1, 301))  # v_t after the step's update, bias-corrected
    analytic = eta * h / (np.sqrt(v_hat) + eps)
    np.testing.assert_allclose(record["directional"], analytic, rtol=1e-5)
    np.testing.assert_allclose(record["sharpness"], analytic, rtol=1e-5)
    live = record["loss"][:-1] > 1e-30  # where float32 still resolves the loss
    rises = record["loss"][1:] > record["loss"][:-1]
    flags = record["directional"][:-1] > 2
    assert live.sum() > 250 and flags[live].any() and not flags[:20].all()
    np.testing.assert_array_equal(rises[live], flags[live])


def _synthetic_trace():
    """400 steps: descent (0-99), decoupling (100-199), λ_max > 2/η (200-229), predictor from 230, loss spike
    from 250 (exceeds 100× the baseline at 263; equals it at 262), peak at 280, back below 0.1 × peak at 290."""
    t = np.arange(400)
    loss = np.where(t < 100, 10.0 ** (-6 * t / 100), 1e-6)
    loss = np.where((t >= 250) & (t <= 280), 1e-6 * 10.0 ** (5 * (t - 250) / 30), loss)
    loss = np.where((t > 280) & (t < 290), 1e-1 * 0.8 ** (t - 280), loss)
    loss = np.where(t >= 290, 1e-3, loss)
    ratio = np.where(t < 100, 1.0, np.where(t < 250, 1e-4, np.where(t <= 290, 10.0, 1.0)))
    sharpness = np.where((t >= 200) & (t <= 285), 2.5, 1.0)
    directional = np.where((t >= 230) & (t <= 282), 2.2, 0.5)
    return loss, ratio, sharpness, directional


def test_stage_detector_on_a_synthetic_trace():
    loss, ratio, sharpness, directional = _synthetic_trace()
    stages, episodes = parts.detect_stages(loss, ratio, sharpness, directional)
    assert episodes == [parts.Episode(predicted=230, warned=200, onset=263, peak=280, recovered=290)]
    expected = np.ones(400, int)
    expected[100:200], expected[200:230], expected[230:281], expected[281:290] = 2, 3, 4, 5
    np.testing.assert_array_equal(stages, expected)
    row = adam_spikes.summarise("synthetic", 0, 0.1, {"loss": loss, "v_max": np.ones(400),
                                                       "directional": directional}, stages, episodes)
    assert (row["spikes"], row["missed"], row["first_lead"], row["min_lead"]) == (1, 0, 33, 33)
    assert row["decoupled_steps"] == 130 and row["fires_outside"] == 0
    assert row["stage_counts"] == "210/100/30/51/9"


def test_stage_detector_marks_a_spike_the_predictor_missed():
    loss, ratio, sharpness, directional = _synthetic_trace()
    directional = np.where(np.arange(400) >= 263, 0.5, directional)  # silent at the onset
    stages, episodes = parts.detect_stages(loss, ratio, sharpness, directional)
    assert episodes[0].predicted is None and episodes[0].onset == 263
    assert stages[262] == 3 and stages[263] == 4
    assert adam_spikes.summarise("s", 0, 0.1, {"loss": loss, "v_max": np.ones(400), "directional": directional},
                                 stages, episodes)["missed"] == 1


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"loss": np.ones(5)}, r"non-empty 1-D arrays of one length"),
    ({"loss": np.full(10, np.nan)}, r"loss must be finite"),
    ({"spike_factor": 0.5}, r"need spike_factor > 1"),
    ({"recover_fraction": 1.0}, r"need spike_factor > 1, 0 < recover_fraction < 1"),
])
def test_stage_detector_bad_inputs(kwargs, message):
    arrays = {"loss": np.ones(10), "ratio": np.ones(10), "sharpness": np.ones(10), "directional": np.ones(10)}
    options = {k: v for k, v in kwargs.items() if k not in arrays}
    arrays |= {k: v for k, v in kwargs.items() if k in arrays}
    with pytest.raises(ValueError, match=message):
        parts.detect_stages(arrays["loss"], arrays["ratio"], arrays["sharpness"], arrays["directional"], **options)
