"""The games and traces of the TALDA reproduction: two-sided PL problems with a known saddle, the three methods.

A game is `f(params, x, y)` with its parameters, its saddle point and the constants the step sizes need
(smoothness L, the y-player's PL constant mu_y, the cross-smoothness L_xy). The objective functions are
module-level so that jit compiles each method once per game family, not once per coupling or seed.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.optim import minimax

__all__ = ["METHODS", "Game", "lyapunov_trace", "method_trace", "quadratic_game", "quadratic_lyapunov_closed_form",
           "yang_game"]

METHODS = ("gda", "agda", "agda_theory", "talda")
MU = 0.1  # the quadratic games' smallest eigenvalue of A and C: mu_x = mu_y = 0.1 (condition number 10)


def quadratic_f(params: tuple[jax.Array, jax.Array, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
    """f(x, y) = ½ xᵀAx + xᵀBy − ½ yᵀCy; params (A [d, d], B [d, d], C [d, d]) with A, C ≻ 0. Returns []."""
    a_mat, b_mat, c_mat = params
    return 0.5 * x @ a_mat @ x + x @ b_mat @ y - 0.5 * y @ c_mat @ y


def yang_f(params: Any, x: jax.Array, y: jax.Array) -> jax.Array:
    """Yang, Kiyavash, He (2020): f = x² + 3 sin²x sin²y − 4y² − 10 sin²y, nonconvex-nonconcave, two-sided PL,
    saddle at (0, 0); x, y [1], params unused. Returns []."""
    del params
    sx, sy = jnp.sin(x[0]), jnp.sin(y[0])
    return x[0] ** 2 + 3 * sx**2 * sy**2 - 4 * y[0] ** 2 - 10 * sy**2


@dataclasses.dataclass(frozen=True)
class Game:
    """One problem: `f(params, x, y)`, saddle (x_star [dx], y_star [dy]), smoothness L, mu_y, L_xy, and random
    starting points drawn by `starts(key, count) -> (x0 [count, dx], y0 [count, dy])`."""

    name: str
    f: Callable[..., jax.Array]
    params: Any
    x_star: jax.Array
    y_star: jax.Array
    smoothness: float
    mu_y: float
    cross_smoothness: float
    inner_step: float  # 1/L_yy: the inner ascent step of the Lyapunov diagnostic
    starts: Callable[[jax.Array, int], tuple[jax.Array, jax.Array]]


def _spd(key: jax.Array, dim: int, low: float, high: float) -> jax.Array:
    """A random symmetric matrix [dim, dim] with eigenvalues geometric from `low` to `high`."""
    q, _ = jnp.linalg.qr(jax.random.normal(key, (dim, dim)))
    return (q * jnp.geomspace(low, high, dim)) @ q.T


def _gaussian_starts(dim: int) -> Callable[[jax.Array, int], tuple[jax.Array, jax.Array]]:
    def starts(key: jax.Array, count: int) -> tuple[jax.Array, jax.Array]:
        kx, ky = jax.random.split(key)
        return jax.random.normal(kx, (count, dim)), jax.random.normal(ky, (count, dim))

    return starts


def quadratic_game(key: jax.Array, *, dim: int, coupling: float) -> Game:
    """d_x = d_y = dim, spectra of A and C geometric in [0.1, 1], ‖B‖₂ = coupling (random direction)."""
    ka, kb, kc = jax.random.split(key, 3)
    a_mat, c_mat = _spd(ka, dim, MU, 1.0), _spd(kc, dim, MU, 1.0)
    b_dir = jax.random.normal(kb, (dim, dim))
    b_mat = coupling * b_dir / jnp.linalg.norm(b_dir, 2)
    hessian = jnp.block([[a_mat, b_mat], [b_mat.T, -c_mat]])
    zero = jnp.zeros(dim)
    return Game(name=f"quadratic_B{coupling:g}", f=quadratic_f, params=(a_mat, b_mat, c_mat), x_star=zero,
                y_star=zero, smoothness=float(jnp.linalg.norm(hessian, 2)), mu_y=MU, cross_smoothness=coupling,
                inner_step=1.0 / float(jnp.linalg.norm(c_mat, 2)), starts=_gaussian_starts(dim))


@functools.cache
def _yang_mu_y(extent: float = 3.0, points: int = 301) -> float:
    """The y-player's PL constant of Yang's example on the box |x|, |y| <= extent, by a grid search of
    ‖∂_y f‖² / (2 [Φ(x) − f]) with Φ(x) = x² (the inner max is at y = 0 for every x)."""
    grid = np.linspace(-extent, extent, points)
    x, y = np.meshgrid(grid, grid[np.abs(grid) > 1e-9], indexing="ij")
    gap = 4 * y**2 + (10 - 3 * np.sin(x) ** 2) * np.sin(y) ** 2
    grad_y = -8 * y - (10 - 3 * np.sin(x) ** 2) * np.sin(2 * y)
    return float(np.min(grad_y**2 / (2 * gap)))


def yang_game() -> Game:
    """Yang et al.'s 1-D example. L = 31 bounds the Hessian (|f_xx| <= 8, |f_yy| <= 28, |f_xy| <= 3); mu_y
    from `_yang_mu_y`; starts uniform in [-2, 2]."""

    def starts(key: jax.Array, count: int) -> tuple[jax.Array, jax.Array]:
        kx, ky = jax.random.split(key)
        return (jax.random.uniform(kx, (count, 1), minval=-2.0, maxval=2.0),
                jax.random.uniform(ky, (count, 1), minval=-2.0, maxval=2.0))

    zero = jnp.zeros(1)
    return Game(name="yang2020", f=yang_f, params=(), x_star=zero, y_star=zero, smoothness=31.0,
                mu_y=_yang_mu_y(), cross_smoothness=3.0, inner_step=1.0 / 28.0, starts=starts)


def step_sizes(game: Game, method: str) -> tuple[float, float]:
    """(tau_x, tau_y): 1/L for both, except AGDA's theory steps tau_x = mu_y² / (18 L³), tau_y = 1/L."""
    tau = 1.0 / game.smoothness
    if method == "agda_theory":
        return game.mu_y**2 / (18 * game.smoothness**3), tau
    return tau, tau


@functools.partial(jax.jit, static_argnames=("f", "method", "num_steps"))
def _trace(f: Callable[..., jax.Array], params: Any, x0: jax.Array, y0: jax.Array, tau_x: jax.Array,
           tau_y: jax.Array, b: jax.Array, *, method: str, num_steps: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Iterates of one method from a batch of starts: x [S, K+1, dx], y [S, K+1, dy], tries [S, K] (gradient
    tries per iteration: 1 for GDA/AGDA, TALDA's while-loop count)."""
    objective = functools.partial(f, params)

    def one(x_start, y_start):
        if method == "talda":
            trace, info = minimax.talda(objective, x_start, y_start, tau_x=tau_x, tau_y=tau_y, b=b,
                                        num_steps=num_steps)
            return trace.x, trace.y, info.tries
        trace = minimax.gda(objective, x_start, y_start, tau_x=tau_x, tau_y=tau_y, num_steps=num_steps,
                            alternating=method != "gda")
        return trace.x, trace.y, jnp.ones(num_steps, jnp.int32)

    return jax.vmap(one)(x0, y0)


def method_trace(game: Game, method: str, x0: jax.Array, y0: jax.Array, num_steps: int) -> tuple[jax.Array, ...]:
    """`_trace` with the method's step sizes (and TALDA's surrogate weight b from `pl_surrogate_weights`)."""
    tau_x, tau_y = step_sizes(game, method)
    _, b = minimax.pl_surrogate_weights(game.mu_y, game.cross_smoothness)
    return _trace(game.f, game.params, x0, y0, jnp.float32(tau_x), jnp.float32(tau_y), jnp.float32(b),
                  method=method, num_steps=num_steps)


@functools.partial(jax.jit, static_argnames=("f", "inner_steps"))
def _lyapunov(f: Callable[..., jax.Array], params: Any, xs: jax.Array, ys: jax.Array, x_star: jax.Array,
              y_star: jax.Array, lam: jax.Array, step: jax.Array, *, inner_steps: int) -> jax.Array:
    objective = functools.partial(f, params)
    one = lambda x, y: minimax.lyapunov(objective, x, y, x_star=x_star, y_star=y_star, lam=lam, step=step,
                                        num_steps=inner_steps)
    return jax.vmap(jax.vmap(one))(xs, ys)


def lyapunov_trace(game: Game, xs: jax.Array, ys: jax.Array, *, lam: float, inner_steps: int) -> np.ndarray:
    """V at every iterate: xs [S, K+1, dx], ys [S, K+1, dy] -> float64 numpy [S, K+1] (NaN where diverged)."""
    values = _lyapunov(game.f, game.params, xs, ys, game.x_star, game.y_star, jnp.float32(lam),
                       jnp.float32(game.inner_step), inner_steps=inner_steps)
    return np.asarray(values, np.float64)


def quadratic_lyapunov_closed_form(params: tuple[jax.Array, ...], x: jax.Array, y: jax.Array,
                                   lam: float) -> jax.Array:
    """V on the quadratic game in closed form: Φ(x) = ½ xᵀ(A + B C⁻¹ Bᵀ)x, Φ* = 0, and
    Φ(x) − f(x, y) = ½ (y − y*(x))ᵀ C (y − y*(x)) with y*(x) = C⁻¹ Bᵀ x. x [d], y [d] -> []."""
    a_mat, b_mat, c_mat = params
    y_opt = jnp.linalg.solve(c_mat, b_mat.T @ x)
    phi = 0.5 * x @ (a_mat + b_mat @ jnp.linalg.solve(c_mat, b_mat.T)) @ x
    return phi + lam * 0.5 * (y - y_opt) @ c_mat @ (y - y_opt)
