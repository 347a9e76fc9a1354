"""Fixed-step ODE integration of a velocity field through diffrax (the `flows` extra, imported when called).

The spec asks for 50-100 Euler/Heun steps or ~20 RK4 steps; diffrax's explicit Runge-Kutta solvers with a
constant step size do exactly that, forwards (t0 < t1) or backwards (t0 > t1) in time.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from icml26zoo.flows.pairs import Velocity
from icml26zoo.validation import check_int, check_interval

__all__ = ["SOLVERS", "integrate"]

SOLVERS = ("euler", "heun", "midpoint", "tsit5")


def _diffrax():
    try:
        import diffrax
    except ImportError as error:
        raise ImportError('ODE sampling needs diffrax: pip install "icml26-zoo[flows]"') from error
    return diffrax


def integrate(velocity: Velocity, z: jax.Array, *, t0: float, t1: float, steps: int = 100,
              solver: str = "heun") -> jax.Array:
    """The solution at t1 [B, D] of dz/dt = velocity(z, t) from z [B, D] at t0, in `steps` equal steps.

    `velocity` takes the batch z [B, D] and times t [B] (all rows share the solver's time). t0 > t1
    integrates backwards. Traceable: call it inside jax.jit.
    """
    t0, t1 = check_interval("t0", t0, 0, 1), check_interval("t1", t1, 0, 1)  # times in [0, 1]
    if t0 == t1:
        raise ValueError(f"t0 and t1 must differ (an empty interval), got {t0} and {t1}")
    check_int("steps", steps)
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {list(SOLVERS)}, got {solver!r}")
    if jnp.ndim(z) != 2:
        raise ValueError(f"z must be a batch of states [B, D], got shape {jnp.shape(z)}")
    diffrax = _diffrax()
    solvers = {"euler": diffrax.Euler, "heun": diffrax.Heun, "midpoint": diffrax.Midpoint, "tsit5": diffrax.Tsit5}
    rows = z.shape[0]

    def field(t, state, args):
        return velocity(state, jnp.full((rows,), t, state.dtype))

    solution = diffrax.diffeqsolve(
        diffrax.ODETerm(field), solvers[solver](), t0=t0, t1=t1, dt0=(t1 - t0) / steps, y0=z,
        stepsize_controller=diffrax.ConstantStepSize(), saveat=diffrax.SaveAt(t1=True), max_steps=steps + 1)
    return solution.ys[-1]
