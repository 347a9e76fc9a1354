"""Optimal transport with the quadratic cost c(x, y) = ‖x − y‖² through the GCF layer, and the Gaussian closed forms.

A potential u is maximised in the Kantorovich dual D(u) = E_μ[u(x)] + E_ν[u^c(y)], u^c(y) = inf_x [c(x, y) − u(x)].
The layer in sense "min" with kernel squared_distance, u(x) = min_j [‖x − y_j‖² − b_j], is c-concave by construction,
and its hard choice y_{j*(x)} = x − ½∇u(x) is the Monge map.

Semi-discrete form (the one trained here): with the candidates fixed at points y_j carrying ν's mass ν_j (e.g. its J
quantiles, each 1/J), u^c(y_j) ≥ b_j, so D(b) = E_μ[u(x)] + Σ_j ν_j b_j is still a lower bound of the transport cost,
concave in b, and every intercept gets the gradient ν_j − μ(cell j) (why this form: in the form with a numerical
transform an empty cell gets no gradient at all, and such dead candidates stalled the map's tails in our runs).

Weak duality on samples: a transform taken as a minimum over finitely many points x_g satisfies u(x_g) + u^c(y) ≤
c(x_g, y) exactly, so with the sample among those points no dual value can exceed the cost of any coupling of the
samples, whatever u is.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from icml26zoo.convex.kernels import squared_distance

Potential = Callable[[jax.Array], jax.Array]


def c_transform(potential_at_points: jax.Array, points: jax.Array, y: jax.Array) -> jax.Array:
    """u^c(y) [B] = min_g [‖x_g − y‖² − u(x_g)] over points x_g [G, n], given u(x_g) [G], for y [B, n]."""
    return jnp.min(squared_distance(y, points) - potential_at_points[None, :], axis=-1)


def semi_discrete_dual(potential_at_x: jax.Array, intercepts: jax.Array, target_weights: jax.Array) -> jax.Array:
    """D = mean_i u(x_i) + Σ_j ν_j b_j for u(x_i) [B] on a sample of μ, intercepts b [J] and ν's masses ν_j [J]."""
    return jnp.mean(potential_at_x) + jnp.sum(target_weights * intercepts)


def kantorovich_dual(potential: Potential, x: jax.Array, y: jax.Array, transform_points: jax.Array) -> jax.Array:
    """D = mean u(x) + mean u^c(y) for samples x [B, n] ~ μ, y [B', n] ~ ν; u^c over transform_points [G, n]."""
    return jnp.mean(potential(x)) + jnp.mean(c_transform(potential(transform_points), transform_points, y))


def gradient_map(potential: Potential, x: jax.Array) -> jax.Array:
    """T(x) = x − ½∇u(x) [B, n], the Monge map of the quadratic cost from a potential's gradient."""
    gradient = jax.grad(lambda points: jnp.sum(potential(points)))(x)
    return x - 0.5 * gradient


def gaussian_map_1d(x: jax.Array, source: tuple[float, float], target: tuple[float, float]) -> jax.Array:
    """The optimal map of N(m_μ, s_μ²) → N(m_ν, s_ν²) for the quadratic cost: m_ν + (s_ν / s_μ)(x − m_μ)."""
    (mean_mu, std_mu), (mean_nu, std_nu) = source, target
    return mean_nu + (std_nu / std_mu) * (x - mean_mu)


def gaussian_quantiles_1d(num: int, mean: float, std: float) -> jax.Array:
    """The J points mean + std·Φ⁻¹((j + ½) / J) [J, 1]: a grid carrying mass 1/J each of N(mean, std²)."""
    levels = (jnp.arange(num, dtype=jnp.float32) + 0.5) / num
    return (mean + std * jax.scipy.special.ndtri(levels))[:, None]


def gaussian_cost_1d(source: tuple[float, float], target: tuple[float, float]) -> float:
    """W₂²(N(m_μ, s_μ²), N(m_ν, s_ν²)) = (m_μ − m_ν)² + (s_μ − s_ν)²."""
    return (source[0] - target[0]) ** 2 + (source[1] - target[1]) ** 2


def empirical_cost_1d(x: jax.Array, y: jax.Array) -> jax.Array:
    """The optimal coupling's cost between two equal-size 1-D samples [B] (sorted matching is optimal in 1-D)."""
    return jnp.mean(jnp.square(jnp.sort(x) - jnp.sort(y)))
