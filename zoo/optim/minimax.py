"""Two-sided PL minimax: GDA and alternating GDA baselines, and TALDA-R (**experimental**).

Paper: "From Lyapunov Analysis to Algorithm Design in two-sided PL Minimax Optimization" (ICML 2026; no
arXiv id). Only the abstract was available.

Problem: min_x max_y f(x, y), f L-smooth, two-sided PL with μ1, μ2 > 0:
‖∇_x f‖² ≥ 2μ1 [f − min_x' f(x', y)] and ‖∇_y f‖² ≥ 2μ2 [max_y' f(x, y') − f].

Baselines (well defined):
- GDA (simultaneous):  x' = x − τ_x ∇_x f(x, y),  y' = y + τ_y ∇_y f(x, y);
- AGDA (Yang, Kiyavash, He 2020): y' = y + τ_y ∇_y f(x, y), then x' = x − τ_x ∇_x f(x, y');
  theory steps τ_y = 1/L, τ_x = μ2²/(18 L³).

**TALDA-R is a [RECONSTRUCTION], experimental**: the paper's update rule was not available. PL bounds
both optimality gaps by gradient norms, so the computable surrogate of the Lyapunov function is

    W(x, y) = a ‖∇_x f(x, y)‖² + b ‖∇_y f(x, y)‖²,

and each iteration takes three actions: (1) ascent y⁺ = y + τ_y ∇_y f(x, y); (2) descent
x⁺ = x − τ_x ∇_x f(x, y⁺); (3) Lyapunov correction: accept (x⁺, y⁺) only if W(x⁺, y⁺) ≤ (1 − κ) W(x, y);
otherwise halve τ_x, take one more ascent step from y⁺ and retry, at most `max_retries` times (a
`lax.while_loop`). After an accepted step τ_x grows by `grow` up to its initial value, so the descent
step adapts to the coupling instead of being fixed at the worst case. W is not a Lyapunov function of
every AGDA step, so all tries can fail; staying put would then stall for good, so a failed iteration
takes its last try unconditionally (a y-heavy step: max_retries ascents, a tiny τ_x), flags it
`accepted = False` and restarts τ_x from its maximum. W decreases by (1 − κ) on every accepted step, by
construction. The weights matter: see `pl_surrogate_weights` (b = 1 stalls under strong coupling even
with the fallback). Every try costs three gradient evaluations (∇_y, ∇_x, and ∇ at the candidate for
W). With B = 0 (no coupling) and κ below the per-player contraction the first try is always accepted
and TALDA-R is separate gradient descent on x and ascent on y.

Diagnostic (not used by any update): the idealised Lyapunov function of Yang et al.,
V(x, y) = [Φ(x) − Φ*] + λ [Φ(x) − f(x, y)] with Φ(x) = max_y f(x, y), for problems whose saddle point is
known (`lyapunov`; Φ by inner gradient ascent, `max_value`).

Everything is jit-able; f is `f(x, y) -> scalar` on float arrays x `[dx]`, y `[dy]`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from icml26zoo.optim.hparams import as_float32, check_concrete
from icml26zoo.validation import check_non_negative, check_positive, check_unit_interval

Objective = Callable[[jax.Array, jax.Array], jax.Array]


class MinimaxTrace(NamedTuple):
    """Iterates of a run: x `[num_steps + 1, dx]`, y `[num_steps + 1, dy]` (row 0 is the start)."""

    x: jax.Array
    y: jax.Array


class TaldaState(NamedTuple):
    """x `[dx]`, y `[dy]`; tau_x: current descent step (float32 []); surrogate: W(x, y) (float32 [])."""

    x: jax.Array
    y: jax.Array
    tau_x: jax.Array
    surrogate: jax.Array


class TaldaInfo(NamedTuple):
    """Per step (float32/int32/bool []): W before and after, whether a try passed the W test (False: the
    fallback step was taken), tries used."""

    surrogate_before: jax.Array
    surrogate_after: jax.Array
    accepted: jax.Array
    tries: jax.Array


def surrogate(f: Objective, x: jax.Array, y: jax.Array, a: float = 1.0, b: float = 1.0) -> jax.Array:
    """W(x, y) = a ‖∇_x f(x, y)‖² + b ‖∇_y f(x, y)‖², float32 []."""
    gx, gy = jax.grad(f, argnums=(0, 1))(x, y)
    sq_x, sq_y = jnp.sum(gx.astype(jnp.float32) ** 2), jnp.sum(gy.astype(jnp.float32) ** 2)
    return as_float32(a) * sq_x + as_float32(b) * sq_y


def max_value(f: Objective, x: jax.Array, y: jax.Array, *, step: float, num_steps: int,
              y_star: jax.Array | None = None) -> jax.Array:
    """Φ(x) = max_y f(x, y) from below: the best f(x, ·) seen by `num_steps` gradient-ascent steps of size `step`
    from y (≤ 1/L_yy; PL makes them converge linearly), and at `y_star` when given. float32 [].

    Every candidate is a lower bound of the max, so the estimate is ≥ f(x, y) (and ≥ f(x, y_star)) exactly,
    whatever the round-off; with y_star the maximiser at the saddle, f(x, y_star) ≥ f(x*, y_star) = Φ*.
    """
    grad_y = jax.grad(f, argnums=1)

    def ascend(_, carry):
        y_cur, best = carry
        y_cur = y_cur + as_float32(step).astype(y_cur.dtype) * grad_y(x, y_cur)
        return y_cur, jnp.maximum(best, f(x, y_cur).astype(jnp.float32))

    best = f(x, y).astype(jnp.float32)
    if y_star is not None:
        best = jnp.maximum(best, f(x, y_star).astype(jnp.float32))
    return jax.lax.fori_loop(0, num_steps, ascend, (y, best))[1]


def lyapunov(f: Objective, x: jax.Array, y: jax.Array, *, x_star: jax.Array, y_star: jax.Array, lam: float = 0.1,
             step: float, num_steps: int = 200) -> jax.Array:
    """The idealised Lyapunov function V = [Φ(x) − Φ*] + λ [Φ(x) − f(x, y)] (Yang, Kiyavash, He 2020) at
    (x, y), with Φ* = f(x*, y*) at the known saddle (x*, y*) and Φ from `max_value(step, num_steps)`.

    A diagnostic for toy problems: computable only where the saddle is known. Both terms are ≥ 0 and V is
    exactly 0 at the saddle (∇_y f = 0 there, so the inner ascent stays put). float32 [].
    """
    phi = max_value(f, x, y, step=step, num_steps=num_steps, y_star=y_star)
    phi_star = f(x_star, y_star).astype(jnp.float32)
    return (phi - phi_star) + as_float32(lam) * (phi - f(x, y).astype(jnp.float32))


def pl_surrogate_weights(mu_y: float, cross_smoothness: float) -> tuple[float, float]:
    """(a, b) = (1, 1 + L_xy/μ2): the ascent residual's weight in W grows with the coupling.

    Why: with y*(x) = argmax_y f(x, y), PL and quadratic growth give ‖y − y*(x)‖ ≤ ‖∇_y f‖/μ2, so
    ‖∇Φ(x)‖ ≤ ‖∇_x f‖ + (L_xy/μ2)‖∇_y f‖, Φ(x) − Φ* ≤ ‖∇Φ‖²/(2μ1) and Φ(x) − f ≤ ‖∇_y f‖²/(2μ2): the
    Lyapunov function is bounded by W with b/a up to (L_xy/μ2)². Weighting ∇_y is what lets the extra
    ascent steps pass the test under strong coupling. Measured on the tests' quadratics (μ2 = 0.1,
    ‖B‖ = 10, 3000 steps): b = 1 stalls (every try rejected); the bound's b = 1 + (L_xy/μ2)² is too
    conservative (stalls after ~1600 steps at ‖z‖ ≈ 0.06); b = 1 + L_xy/μ2 converges (‖z‖ 5 → 3e-5).
    """
    check_concrete(check_positive, "mu_y", mu_y)
    check_concrete(check_non_negative, "cross_smoothness", cross_smoothness)
    return 1.0, 1.0 + cross_smoothness / mu_y


def gda(
    f: Objective, x0: jax.Array, y0: jax.Array, *, tau_x: float, tau_y: float, num_steps: int,
    alternating: bool = False,
) -> MinimaxTrace:
    """Simultaneous GDA, or AGDA (ascent first, descent at the new y) when `alternating`."""
    check_concrete(check_positive, "tau_x", tau_x)
    check_concrete(check_positive, "tau_y", tau_y)
    grad_x, grad_y = jax.grad(f, argnums=0), jax.grad(f, argnums=1)

    def step(carry, _):
        x, y = carry
        if alternating:
            y = y + tau_y * grad_y(x, y)
            x = x - tau_x * grad_x(x, y)
        else:
            x, y = x - tau_x * grad_x(x, y), y + tau_y * grad_y(x, y)
        return (x, y), (x, y)

    _, (xs, ys) = jax.lax.scan(step, (x0, y0), None, length=num_steps)
    return MinimaxTrace(jnp.concatenate([x0[None], xs]), jnp.concatenate([y0[None], ys]))


def talda_init(
    f: Objective, x: jax.Array, y: jax.Array, *, tau_x: float, a: float = 1.0, b: float = 1.0
) -> TaldaState:
    """The TALDA-R state at (x, y) with descent step `tau_x` and W(x, y)."""
    return TaldaState(x, y, as_float32(tau_x), surrogate(f, x, y, a, b))


def talda_step(
    f: Objective, state: TaldaState, *, tau_y: float, tau_x_max: float, a: float = 1.0, b: float = 1.0,
    kappa: float = 1e-3, max_retries: int = 20, grow: float = 2.0,
) -> tuple[TaldaState, TaldaInfo]:
    """One TALDA-R iteration (ascent, descent, Lyapunov-checked acceptance with retries)."""
    grad_x, grad_y = jax.grad(f, argnums=0), jax.grad(f, argnums=1)
    target = (1.0 - as_float32(kappa)) * state.surrogate

    def try_once(carry):
        y_base, tau, tries, _, _, _, _ = carry
        y_new = y_base + tau_y * grad_y(state.x, y_base)
        x_new = state.x - tau.astype(state.x.dtype) * grad_x(state.x, y_new)
        w_new = surrogate(f, x_new, y_new, a, b)
        accepted = w_new <= target
        # A rejected try halves τ_x and keeps its ascent step as the base of the next try.
        return y_new, jnp.where(accepted, tau, 0.5 * tau), tries + 1, accepted, x_new, y_new, w_new

    def keep_trying(carry):
        return jnp.logical_and(~carry[3], carry[2] < max_retries)

    no_tries, rejected = jnp.zeros([], jnp.int32), jnp.zeros([], bool)
    init = (state.y, state.tau_x, no_tries, rejected, state.x, state.y, state.surrogate)
    _, tau, tries, accepted, x_new, y_new, w_new = jax.lax.while_loop(keep_trying, try_once, init)
    # Accepted: keep the try and let τ_x grow back. All tries rejected: take the last try anyway (its
    # y has had max_retries ascent steps, its τ_x is tiny) and restart τ_x from the maximum.
    new_state = TaldaState(
        x=x_new, y=y_new, surrogate=w_new,
        tau_x=jnp.where(accepted, jnp.minimum(tau * as_float32(grow), as_float32(tau_x_max)), tau_x_max),
    )
    return new_state, TaldaInfo(state.surrogate, new_state.surrogate, accepted, tries)


def talda(
    f: Objective, x0: jax.Array, y0: jax.Array, *, tau_x: float, tau_y: float, num_steps: int, a: float = 1.0,
    b: float = 1.0, kappa: float = 1e-3, max_retries: int = 20, grow: float = 2.0,
) -> tuple[MinimaxTrace, TaldaInfo]:
    """TALDA-R (experimental reconstruction) for `num_steps` iterations from (x0, y0).

    `tau_x` is the initial and largest descent step, `tau_y` the ascent step, `kappa` ∈ [0, 1) the
    required relative decrease of W per accepted step, `grow` ≥ 1 the step growth after an acceptance.
    `a`, `b` weight the surrogate W (see `pl_surrogate_weights` for strongly coupled problems).
    Returns the iterates and the per-step `TaldaInfo` (each field `[num_steps]`).
    """
    for name, value in (("tau_x", tau_x), ("tau_y", tau_y), ("a", a), ("b", b)):
        check_concrete(check_positive, name, value)
    check_concrete(check_unit_interval, "kappa", kappa)
    if not isinstance(max_retries, int) or max_retries < 1:
        raise ValueError(f"max_retries must be an integer >= 1, got {max_retries!r}")
    check_concrete(check_non_negative, "grow - 1", grow - 1)

    def step(state, _):
        state, info = talda_step(f, state, tau_y=tau_y, tau_x_max=tau_x, a=a, b=b, kappa=kappa,
                                 max_retries=max_retries, grow=grow)
        return state, (state.x, state.y, info)

    state = talda_init(f, x0, y0, tau_x=tau_x, a=a, b=b)
    _, (xs, ys, info) = jax.lax.scan(step, state, None, length=num_steps)
    return MinimaxTrace(jnp.concatenate([x0[None], xs]), jnp.concatenate([y0[None], ys])), info

