"""TALDA reproduction: bad inputs, the Lyapunov diagnostic against its closed form (non-negative, zero exactly
at the saddle), TALDA-R's surrogate decrease on every accepted step, and AGDA's theorem with its step sizes. The
SMOKE experiment runs in the experiment contract (tests/repro/test_experiments.py) and the notebook test."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26zoo.optim import minimax
from icml26zoo.repro import talda
from icml26zoo.repro import talda_parts as parts
from icml26zoo.repro.common import Budget

TINY = Budget(steps=3, batch_size=1, seq_len=2, seeds=(0,))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"games": ("quadratic_B3",)}, r"games: unknown name 'quadratic_B3'; expected one of \['quadratic_B0'"),
    ({"methods": ("adam",)}, r"methods: unknown name 'adam'"),
    ({"methods": ()}, r"methods must name at least one"),
    ({"lam": 0.0}, r"lam \(the Lyapunov weight λ\) must be a finite positive number, got 0.0"),
    ({"inner_steps": 0}, r"inner_steps must be an integer >= 1, got 0"),
    ({"tolerance": 1.5}, r"tolerance .* must be a number in \(0, 1\), got 1.5"),
    ({"budget": Budget(steps=3, batch_size=1, seq_len=300)}, r"budget.seq_len .* must be <= 256, got 300"),
])
def test_bad_arguments_raise_naming_them(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        talda.run(tmp_path / "run", **({"budget": TINY} | kwargs))
    assert not (tmp_path / "run").exists()


def _lyapunov(game, x, y, lam=0.1):
    f = lambda xx, yy: game.f(game.params, xx, yy)
    return minimax.lyapunov(f, x, y, x_star=game.x_star, y_star=game.y_star, lam=lam, step=game.inner_step,
                            num_steps=200)


@pytest.mark.parametrize("coupling", [0.0, 2.0])
def test_lyapunov_diagnostic_equals_its_closed_form_on_a_quadratic_game(coupling):
    game = parts.quadratic_game(jax.random.PRNGKey(1), dim=4, coupling=coupling)
    xs, ys = game.starts(jax.random.PRNGKey(2), 6)
    got = np.asarray(jax.vmap(lambda x, y: _lyapunov(game, x, y, lam=0.3))(xs, ys))
    want = np.asarray(jax.vmap(lambda x, y: parts.quadratic_lyapunov_closed_form(game.params, x, y, 0.3))(xs, ys))
    np.testing.assert_allclose(got, want, rtol=1e-4)


@pytest.mark.parametrize("game", [parts.quadratic_game(jax.random.PRNGKey(5), dim=3, coupling=1.0),
                                  parts.yang_game()], ids=["quadratic", "yang2020"])
def test_lyapunov_is_nonnegative_and_zero_exactly_at_the_saddle(game):
    assert float(_lyapunov(game, game.x_star, game.y_star)) == 0.0
    xs, ys = game.starts(jax.random.PRNGKey(6), 64)
    values = np.asarray(jax.vmap(lambda x, y: _lyapunov(game, x, y))(xs, ys))
    assert np.all(values > 0)
    # Near the saddle too (V ~ |z|², float32 still resolves it): off the saddle it stays positive.
    tiny = np.asarray(jax.vmap(lambda x, y: _lyapunov(game, x, y))(1e-4 * xs, 1e-4 * ys))
    assert np.all(tiny >= 0) and np.all(tiny[np.linalg.norm(xs, axis=1) > 0] > 0)


@pytest.mark.parametrize("name", ["quadratic_B10", "yang2020"])
def test_talda_surrogate_decreases_by_kappa_on_every_accepted_step(name):
    # The spec's TALDA-R claim, by construction: W(x+, y+) <= (1 - κ) W(x, y) whenever the step is accepted.
    game = talda.make_game(name, 0, 4)
    x0, y0 = game.starts(jax.random.PRNGKey(7), 1)
    tau = 1.0 / game.smoothness
    _, b = minimax.pl_surrogate_weights(game.mu_y, game.cross_smoothness)
    f = lambda x, y: game.f(game.params, x, y)
    _, info = jax.jit(lambda: minimax.talda(f, x0[0], y0[0], tau_x=tau, tau_y=tau, b=b, kappa=1e-3,
                                            num_steps=300))()
    before, after, accepted = (np.asarray(v) for v in (info.surrogate_before, info.surrogate_after, info.accepted))
    assert accepted.mean() > 0.9
    live = accepted & (before > 0)
    assert live.sum() > 50 and np.all(after[live] <= (1 - 1e-3) * before[live])


@pytest.mark.parametrize("coupling", [1.0, 10.0])
def test_agda_with_theory_steps_decreases_the_lyapunov_function_at_the_theorem_rate(coupling):
    # Yang et al.'s theorem for AGDA (τ_y = 1/L, τ_x = μ_y²/(18 L³)): V_(t+1) <= (1 − μ_x τ_x / 2) V_t.
    game = parts.quadratic_game(jax.random.PRNGKey(3), dim=4, coupling=coupling)
    x0, y0 = game.starts(jax.random.PRNGKey(4), 3)
    xs, ys, _ = parts.method_trace(game, "agda_theory", x0, y0, 300)
    values = parts.lyapunov_trace(game, xs, ys, lam=0.1, inner_steps=200)
    tau_x, _ = parts.step_sizes(game, "agda_theory")
    assert np.all(values[:, 1:] <= (1 - parts.MU * tau_x / 2) * values[:, :-1])


def test_iterations_to_tolerance_and_divergence():
    values = np.array([[1.0, 0.1, 1e-9, 0.0], [1.0, 2.0, np.nan, np.nan], [4.0, 4.0, 4.0, 4.0]])
    assert talda.iterations_to(values, 1e-8).tolist() == [2, -1, -1]
    row = talda.summarise(parts.yang_game(), "gda", values[:2], np.ones((2, 3)), 1e-8)
    assert row["reached"] == "1/2" and row["iters_to_tol"] == 2 and row["grads_per_iter"] == 2.0
    assert row["diverged"] == "1/2" and row["V_final"] == "diverged"  # the median of {0, inf}
    assert jnp.isfinite(row["V0"])
