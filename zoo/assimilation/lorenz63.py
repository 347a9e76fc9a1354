"""Lorenz-63 with additive model noise, and its analytic diffusion surrogate.

The system dx/dt = σ(y − x), dy/dt = x(ρ − z) − y, dz/dt = xy − βz (σ = 10, ρ = 28, β = 8/3) is integrated by
RK4 with step dt over `substeps` steps per assimilation cycle (0.01 x 10 = 0.1 time units by default), and each
cycle adds Gaussian model noise: x_{n+1} = Φ(x_n) + w, w ~ N(0, diag(noise_var)). The noised transition is then
Gaussian, p_s(z | x_n) = N(α_s Φ(x_n), diag(α_s² noise_var + σ_s²)), so its score is analytic:
`Lorenz63Transition` is a diffusion surrogate with no learning error, the counterpart of the paper's learned
one (which the zoo does not train; see docs/papers/surge.md).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

__all__ = ["Lorenz63Transition", "lorenz63_flow", "lorenz63_vector_field"]

SIGMA, RHO, BETA = 10.0, 28.0, 8.0 / 3.0


def lorenz63_vector_field(x: jax.Array) -> jax.Array:
    """dx/dt of Lorenz-63: x [..., 3] -> [..., 3]."""
    first, second, third = x[..., 0], x[..., 1], x[..., 2]
    return jnp.stack([SIGMA * (second - first), first * (RHO - third) - second, first * second - BETA * third],
                     axis=-1)


def lorenz63_flow(x: jax.Array, *, dt: float, substeps: int) -> jax.Array:
    """Φ(x): `substeps` RK4 steps of size dt, x [..., 3] -> [..., 3]."""
    def rk4(state: jax.Array, _: None) -> tuple[jax.Array, None]:
        k1 = lorenz63_vector_field(state)
        k2 = lorenz63_vector_field(state + 0.5 * dt * k1)
        k3 = lorenz63_vector_field(state + 0.5 * dt * k2)
        k4 = lorenz63_vector_field(state + dt * k3)
        return state + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4), None

    return jax.lax.scan(rk4, x, None, length=substeps)[0]


@functools.partial(jax.tree_util.register_dataclass, data_fields=["noise_var"], meta_fields=["dt", "substeps"])
@dataclasses.dataclass(frozen=True)
class Lorenz63Transition:
    """x_{n+1} = Φ(x_n) + w, w ~ N(0, diag(noise_var [3])); dt and substeps are static (part of the jit key)."""

    noise_var: jax.Array
    dt: float = 0.01
    substeps: int = 10

    def mean(self, x: jax.Array) -> jax.Array:
        """Φ(x): [N, 3] -> [N, 3]."""
        return lorenz63_flow(x, dt=self.dt, substeps=self.substeps)

    def score(self, z: jax.Array, alpha: jax.Array, sigma: jax.Array, condition: jax.Array) -> jax.Array:
        """∇_z log N(z; α Φ(x_n), diag(α² noise_var + σ²)): z, condition x_n [N, 3] -> [N, 3]."""
        return -(z - alpha * self.mean(condition)) / (alpha**2 * self.noise_var + sigma**2)

    def sample(self, key: jax.Array, x: jax.Array) -> jax.Array:
        """One noisy transition of each state: [..., 3] -> [..., 3]."""
        return self.mean(x) + jnp.sqrt(self.noise_var) * jax.random.normal(key, x.shape, x.dtype)
