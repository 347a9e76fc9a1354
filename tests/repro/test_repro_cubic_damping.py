"""The cubic-damping reproduction: bad inputs, the damping rule, the test problems, the exact reductions of
the compared methods inside the problem runner, and the GPT cells' optimizer configs. The SMOKE experiment
itself runs in the experiment contract (tests/repro/test_experiments.py: the notebook at SMOKE, outputs, resume
through the command line)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26zoo.registry import OPTIMIZERS
from icml26zoo.repro import cubic_damping
from icml26zoo.repro import cubic_damping_parts as parts
from icml26zoo.repro.common import Budget, Experiment

# Zero damping must reproduce the plain methods bit for bit, so these tests keep XLA's full pipeline.
EXACT_COMPILE = True


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"methods": ("msgd", "nesterov")}, r"methods: unknown name 'nesterov'; expected one of \['msgd', 'cd_sgd'"),
    ({"gpt_methods": ("lion",)}, r"gpt_methods: unknown name 'lion'"),
    ({"problems": ("beale",)}, r"problems: unknown name 'beale'; expected one of \['quadratic'"),
    ({"problems": (), "gpt_methods": ()}, r"problems and gpt_methods are both empty"),
    ({"condition": 0.5}, r"condition .* must be a number in \[1, inf\), got 0.5"),
    ({"noise": 0.0}, r"noise .* must be a finite positive number, got 0.0"),
    ({"damping_multiple": -3.0}, r"damping_multiple must be a finite positive number, got -3.0"),
    ({"momentum": 1.0}, r"momentum must be a number in \[0, 1\), got 1.0"),
    ({"gpt_sgd_lr": -0.1}, r"gpt_sgd_lr must be a finite positive number, got -0.1"),
    ({"gpt_adam_lr": float("nan")}, r"gpt_adam_lr must be a finite positive number, got nan"),
    ({"d_model": 60}, r"d_model must be a multiple of 8 .*got 60"),
    ({"problem_steps": 0}, r"problem_steps must be an integer >= 1, got 0"),
    ({"dim": 1}, r"dim must be an integer >= 2, got 1"),
])
def test_bad_arguments_raise_before_anything_is_written(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cubic_damping.run(tmp_path / "run", budget=cubic_damping.QUICK, **kwargs)
    assert not (tmp_path / "run").exists()


def test_damping_rule_bounds_steps_by_the_reference_velocity():
    options = {m: parts.method_options(m, g_rms=0.5, damping_multiple=4.0, momentum=0.9) for m in parts.METHODS}
    v_ref = 2.0
    assert options["msgd"] == options["adam"] == {}
    assert options["cd_sgd"]["damping"] == pytest.approx(1 / v_ref**2)  # |v'| < 1/√c = v_ref
    assert options["af_sgd"] == pytest.approx({"coupling": 0.1 / v_ref**2, "temperature": v_ref**2 / 4})
    assert options["cd_adam"]["damping"] == pytest.approx(1 / 16)


def test_quadratic_has_the_requested_spectrum_and_gradient_scale():
    problem = parts.make_problem("quadratic", tuple(range(64)), dim=16, condition=100.0, noise=0.3)
    data = jax.tree.map(lambda x: x[0], problem.data)
    hessian = jax.hessian(problem.loss)(jnp.zeros(16), data)
    eigenvalues = np.linalg.eigvalsh(np.asarray(hessian, np.float64))
    np.testing.assert_allclose([eigenvalues.min(), eigenvalues.max()], [0.01, 1.0], rtol=1e-4)
    grads = jax.vmap(jax.grad(problem.loss))(problem.x0, problem.data)
    assert float(jnp.sqrt(jnp.mean(grads**2))) == pytest.approx(problem.g_rms, rel=0.15)
    assert problem.noise == 0.0  # only noisy_quadratic adds noise
    noisy = parts.make_problem("noisy_quadratic", (0,), dim=16, condition=100.0, noise=0.3)
    assert noisy.noise == 0.3 and noisy.g_rms == pytest.approx(math.hypot(problem.g_rms, 0.3), rel=1e-6)


def test_rosenbrock_minimum_and_start():
    problem = parts.make_problem("rosenbrock", (0, 1), dim=2, condition=1.0, noise=0.3)
    assert float(problem.loss(jnp.ones(2), None)) == 0.0
    assert np.all(np.abs(np.asarray(problem.x0) - np.asarray(parts.ROSENBROCK_START)) < 0.5)


@pytest.mark.parametrize(("method", "plain", "zero"), [
    ("cd_sgd", "msgd", {"damping": 0.0}), ("af_sgd", "msgd", {"coupling": 0.0, "temperature": 1.0}),
    ("cd_adam", "adam", {"damping": 0.0}),
])
def test_runner_reduces_to_the_plain_method_at_zero_damping(method, plain, zero):
    problem = parts.make_problem("noisy_quadratic", (0, 1), dim=8, condition=100.0, noise=0.3)
    lr = problem.learning_rates[0 if plain == "msgd" else 1]
    ours = parts.problem_losses(problem, parts.transform(method, lr, zero, momentum=0.9), 40)
    ref = parts.problem_losses(problem, parts.transform(plain, lr, {}, momentum=0.9), 40)
    assert ours.shape == (2, 41)
    np.testing.assert_array_equal(ours, ref)


def test_damping_bounds_a_diverging_heavy_ball():
    # Past the heavy ball's edge (η λ_max = 6 > 3.8) plain momentum overflows; the cubic damping keeps every
    # step within η v_ref, so the loss stays finite.
    problem = parts.make_problem("quadratic", (0,), dim=8, condition=10.0, noise=0.3)
    options = parts.method_options("cd_sgd", g_rms=problem.g_rms, damping_multiple=3.0, momentum=0.9)
    plain = parts.problem_losses(problem, parts.transform("msgd", 6.0, {}, momentum=0.9), 400)
    damped = parts.problem_losses(problem, parts.transform("cd_sgd", 6.0, options, momentum=0.9), 400)
    assert np.isinf(plain[0, -1]) and np.all(np.isfinite(damped))


def test_gpt_cells_use_the_registered_optimizers_with_the_rule(tmp_path):
    experiment = Experiment(tmp_path / "run", budget=Budget(steps=10, batch_size=2, seq_len=16))
    settings = {"d_model": 32, "momentum": 0.9, "damping_multiple": 3.0, "sgd_lr": 0.3, "adam_lr": 3e-3}
    for method, registered in parts.METHODS.items():
        config = cubic_damping.gpt_config(experiment, method, seed=1, **settings)
        assert config.optim.name == registered and config.seed == 1 and config.optim.weight_decay == 0.0
        assert config.data.data_dir.startswith(str(tmp_path))
        OPTIMIZERS.get(registered)(config.optim.learning_rate, config.optim)  # options are accepted
    damping = dict(cubic_damping.gpt_config(experiment, "cd_sgd", seed=0, **settings).optim.options)["damping"]
    # v_ref = 3 / √N: N parameters of the width-32 model, between 10k and 100k.
    assert 1e4 / 9 < damping < 1e5 / 9
