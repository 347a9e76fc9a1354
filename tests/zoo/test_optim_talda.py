"""GDA / AGDA / TALDA-R on two-sided PL problems (a coupled quadratic game and Yang et al.'s nonconvex
example): rates and Lyapunov descent."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26zoo.optim import minimax as T

pytestmark = pytest.mark.usefixtures("fast_compile")  # tolerance and range checks only (tests/conftest.py)

MU = 0.1  # μ1 = μ2: the smallest eigenvalue of A and C


def quadratic_game(a_mat: jax.Array, b_mat: jax.Array, c_mat: jax.Array) -> T.Objective:
    """f(x, y) = ½ xᵀAx + xᵀBy − ½ yᵀCy with A, C ≻ 0 (`[dx, dx]`, `[dx, dy]`, `[dy, dy]`): two-sided PL
    (strongly convex-concave), saddle at 0."""

    def f(x: jax.Array, y: jax.Array) -> jax.Array:
        return 0.5 * x @ a_mat @ x + x @ b_mat @ y - 0.5 * y @ c_mat @ y

    return f


def yang_example(x: jax.Array, y: jax.Array) -> jax.Array:
    """f(x, y) = x² + 3 sin²x sin²y − 4y² − 10 sin²y (Yang et al. 2020): nonconvex–nonconcave, two-sided
    PL, saddle at (0, 0). x, y `[1]`; returns []."""
    sx, sy = jnp.sin(x[0]), jnp.sin(y[0])
    return x[0] ** 2 + 3 * sx**2 * sy**2 - 4 * y[0] ** 2 - 10 * sy**2


def linear_rate(
    trace: T.MinimaxTrace, *, start: int = 0, stop: int | None = None, floor: float = 1e-6
) -> jax.Array:
    """Per-step contraction factor of ‖z_t‖ = ‖(x_t, y_t)‖ over steps [start, stop): exp of the
    least-squares slope of log ‖z_t‖ against t (< 1 converges linearly, > 1 diverges). float32 [].

    Steps with ‖z_t‖ ≤ floor·‖z_start‖ (float32 round-off near the saddle, or exactly 0) are left out.
    """
    z = jnp.concatenate([trace.x, trace.y], axis=1)[start:stop].astype(jnp.float32)
    norm = jnp.linalg.norm(z, axis=1)
    keep = (norm > floor * norm[0]).astype(jnp.float32)
    log_norm = jnp.log(jnp.where(keep > 0, norm, 1.0))
    t = jnp.arange(norm.shape[0], dtype=jnp.float32)
    count = jnp.sum(keep)
    t_c = t - jnp.sum(keep * t) / count
    log_c = log_norm - jnp.sum(keep * log_norm) / count
    return jnp.exp(jnp.sum(keep * t_c * log_c) / jnp.sum(keep * t_c * t_c))


def _spd(key, dim, low, high):
    q, _ = jnp.linalg.qr(jax.random.normal(key, (dim, dim)))
    return (q * jnp.geomspace(low, high, dim)) @ q.T


@functools.cache
def _problem(coupling):
    """d_x = d_y = 10, A and C with spectra in [0.1, 1] (condition 10), ‖B‖₂ = coupling."""
    ka, kb, kc, kx, ky = jax.random.split(jax.random.PRNGKey(0), 5)
    a_mat, c_mat = _spd(ka, 10, MU, 1.0), _spd(kc, 10, MU, 1.0)
    b_dir = jax.random.normal(kb, (10, 10))
    b_mat = coupling * b_dir / jnp.linalg.norm(b_dir, 2)
    hessian = jnp.block([[a_mat, b_mat], [b_mat.T, -c_mat]])
    smoothness = float(jnp.linalg.norm(hessian, 2))
    return (a_mat, b_mat, c_mat), smoothness, jax.random.normal(kx, (10,)), jax.random.normal(ky, (10,))


@functools.partial(jax.jit, static_argnames=("num_steps",))
def _talda_quadratic(mats, x0, y0, tau_x, tau_y, b, num_steps):
    return T.talda(quadratic_game(*mats), x0, y0, tau_x=tau_x, tau_y=tau_y, b=b, num_steps=num_steps)


@functools.partial(jax.jit, static_argnames=("num_steps", "alternating"))
def _gda_quadratic(mats, x0, y0, tau_x, tau_y, num_steps, alternating=False):
    return T.gda(quadratic_game(*mats), x0, y0, tau_x=tau_x, tau_y=tau_y, num_steps=num_steps,
                 alternating=alternating)


def _norms(trace):
    return np.linalg.norm(np.concatenate([trace.x, trace.y], axis=1), axis=1)


def _talda_rate(coupling, num_steps=400):
    mats, smoothness, x0, y0 = _problem(coupling)
    _, b = T.pl_surrogate_weights(MU, coupling)
    trace, info = _talda_quadratic(mats, x0, y0, 1 / smoothness, 1 / smoothness, b, num_steps)
    return float(linear_rate(trace)), trace, info


def test_agda_with_theory_step_sizes_converges_linearly_on_the_quadratic():
    mats, smoothness, x0, y0 = _problem(1.0)
    tau_x = MU**2 / (18 * smoothness**3)
    trace = _gda_quadratic(mats, x0, y0, tau_x, 1 / smoothness, 30_000, alternating=True)
    first, second = (float(linear_rate(trace, start=s, stop=e)) for s, e in ((5_000, 15_000), (15_000, 30_001)))
    norms = _norms(trace)
    # Theory steps are tiny (τ_x ≈ 2e-4): a contraction of about 1 − 7e-5 per step, steady in both windows.
    assert first < 1 - 2e-5 and second < 1 - 2e-5
    assert norms[30_000] < 0.5 * norms[15_000] < 0.25 * norms[5_000]


def test_agda_converges_linearly_on_the_nonconvex_example():
    trace = jax.jit(lambda: T.gda(yang_example, jnp.ones(1), jnp.ones(1), tau_x=0.05, tau_y=0.05,
                                  num_steps=200, alternating=True))()
    first, second = float(linear_rate(trace, stop=60)), float(linear_rate(trace, start=60, stop=120))
    assert first < 0.95 and second < 0.95 and abs(np.log(first) / np.log(second) - 1) < 0.1


@pytest.mark.parametrize("coupling", [0.1, 1.0, 10.0])
def test_talda_surrogate_descends_on_every_step_and_reaches_the_saddle(coupling):
    _, trace, info = _talda_rate(coupling, num_steps=2000)
    before, after, accepted = (np.asarray(v) for v in (info.surrogate_before, info.surrogate_after, info.accepted))
    assert accepted.mean() > 0.9  # fallback steps (all retries rejected) are rare
    decreasing = accepted & (before > 0)  # W = 0 exactly once float32 reaches the saddle
    assert np.all(after[decreasing] <= (1 - 1e-3) * before[decreasing])
    norms = _norms(trace)
    assert norms[-1] < 1e-2 * norms[0]


def test_talda_reaches_the_nonconvex_saddle_with_surrogate_descent():
    trace, info = jax.jit(lambda: T.talda(yang_example, jnp.ones(1), jnp.ones(1), tau_x=0.05, tau_y=0.05,
                                          num_steps=300))()
    accepted = np.asarray(info.accepted)
    assert np.all(np.asarray(info.surrogate_after)[accepted] <= np.asarray(info.surrogate_before)[accepted])
    assert accepted.mean() > 0.9 and _norms(trace)[-1] < 1e-6


def test_decoupled_talda_is_no_slower_than_separate_gd_and_ga():
    mats, _, x0, y0 = _problem(0.0)
    tau_x, tau_y = 1 / float(jnp.linalg.norm(mats[0], 2)), 1 / float(jnp.linalg.norm(mats[2], 2))
    trace, info = _talda_quadratic(mats, x0, y0, tau_x, tau_y, 1.0, 400)
    separate = _gda_quadratic(mats, x0, y0, tau_x, tau_y, 400)  # B = 0: GD on x and GA on y, separately
    reach = lambda tr: int(np.argmax(_norms(tr) <= 1e-8))
    assert 0 < reach(trace) <= reach(separate)


def test_talda_converges_where_gda_diverges_and_its_rate_grows_with_coupling():
    # Claims checked: linear convergence under two-sided PL with a rate that depends on the
    # cross-smoothness L_xy = ‖B‖ (weakly coupled problems converge faster).
    rates = {c: _talda_rate(c)[0] for c in (0.1, 3.0, 10.0)}
    assert rates[0.1] < rates[3.0] < rates[10.0] < 1.0
    mats, smoothness, x0, y0 = _problem(10.0)
    with np.errstate(over="ignore", invalid="ignore"):  # the divergent run overflows float32
        gda = _norms(_gda_quadratic(mats, x0, y0, 1 / smoothness, 1 / smoothness, 400))
    assert not gda[-1] < gda[0]  # GDA at the same step sizes diverges (norm grows or overflows to nan)
    # TALDA-R beats GDA with its best fixed step on a grid, even per gradient evaluation: an iteration
    # here takes 2 tries of (∇_y, ∇_x, ∇ for W), about 4 full-gradient equivalents.
    with np.errstate(over="ignore", invalid="ignore"):
        best_gda = min(float(linear_rate(_gda_quadratic(mats, x0, y0, t, t, 400)))
                       for t in np.geomspace(1e-3, 2.0, 16))
    assert np.log(rates[10.0]) / 4 < np.log(best_gda) < 0
    # AGDA with its theory step sizes converges, but ≥ 10× more slowly in log-rate than TALDA-R.
    agda = _gda_quadratic(mats, x0, y0, MU**2 / (18 * smoothness**3), 1 / smoothness, 4000, alternating=True)
    assert np.log(float(linear_rate(agda, start=1000))) > 0.1 * np.log(rates[10.0])


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"tau_x": 0.0}, "tau_x"), ({"tau_y": -1.0}, "tau_y"), ({"kappa": 1.0}, "kappa"),
     ({"max_retries": 0}, "max_retries"), ({"grow": 0.5}, "grow"), ({"b": 0.0}, "b")],
)
def test_bad_hyperparameters_raise_naming_the_argument(kwargs, name):
    args = {"tau_x": 0.1, "tau_y": 0.1, "num_steps": 2} | kwargs
    with pytest.raises(ValueError, match=name):
        T.talda(yang_example, jnp.ones(1), jnp.ones(1), **args)
