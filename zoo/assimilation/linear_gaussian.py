"""The linear-Gaussian system x_{n+1} = A x_n + w, w ~ N(0, Q), whose diffusion surrogate is exact.

Its transition p(x_{n+1} | x_n) = N(A x_n, Q) has, under the VP forward process (see `config.vp_schedule`),
the noised marginal p_s(z | x_n) = N(α_s A x_n, α_s² Q + σ_s² I), so the score a diffusion model would learn
is known in closed form: ∇_z log p_s(z | x_n) = −(α_s² Q + σ_s² I)⁻¹ (z − α_s A x_n). `GaussianTransition`
plays the role of the trained score network, with no approximation error.

`surrogate_transition` computes the exact law of what the discretised reverse chain actually samples: the
chain is linear in (z, x_n), so its z_0 given x_n is N(F x_n, P) with (F, P) propagated through the K Euler
steps in float64. (F, P) differ from (A, Q) by the discretisation error only; a Kalman filter with (F, P) is
the exact answer SURGE's particle cloud must match (`icml26zoo.assimilation.kalman`).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.assimilation.config import SurgeConfig, vp_schedule
from icml26zoo.validation import check_float_array

__all__ = ["GaussianTransition", "gaussian_transition", "surrogate_transition"]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class GaussianTransition:
    """x_{n+1} = A x_n + w, w ~ N(0, Q): `matrix` A [D, D], `noise_cov` Q [D, D] (symmetric positive
    definite) and Q's eigendecomposition Q = V diag(e) Vᵀ (`noise_eigvals` e [D], `noise_eigvecs` V [D, D]).
    Build it with `gaussian_transition` (checked, and it computes the eigendecomposition).
    """

    matrix: jax.Array
    noise_cov: jax.Array
    noise_eigvals: jax.Array
    noise_eigvecs: jax.Array

    def mean(self, x: jax.Array) -> jax.Array:
        """A x: [N, D] -> [N, D]."""
        return x @ self.matrix.T

    def score(self, z: jax.Array, alpha: jax.Array, sigma: jax.Array, condition: jax.Array) -> jax.Array:
        """∇_z log p_s(z | x_n) at noise level (α_s, σ_s): z [N, D], condition x_n [N, D] -> [N, D]."""
        # (α²Q + σ²I)⁻¹ = V diag(1 / (α² e + σ²)) Vᵀ: matrix products only (a LAPACK solve per reverse step
        # costs ~20 ms of call overhead on CPU whatever the size).
        residual = (z - alpha * self.mean(condition)) @ self.noise_eigvecs
        return -(residual / (alpha**2 * self.noise_eigvals + sigma**2)) @ self.noise_eigvecs.T

    def sample(self, key: jax.Array, x: jax.Array) -> jax.Array:
        """One transition of each state: x [..., D] -> [..., D]."""
        root = self.noise_eigvecs * jnp.sqrt(self.noise_eigvals)  # root rootᵀ = Q
        return self.mean(x) + jax.random.normal(key, x.shape, x.dtype) @ root.T


def gaussian_transition(matrix: np.ndarray | jax.Array, noise_cov: np.ndarray | jax.Array) -> GaussianTransition:
    """A checked `GaussianTransition`: matrix [D, D], noise_cov [D, D] symmetric positive definite."""
    dim, _ = check_float_array("matrix", jnp.asarray(matrix), (None, None), "[D, D]")
    check_float_array("noise_cov", jnp.asarray(noise_cov), (dim, dim), "[D, D]")
    q = np.asarray(noise_cov, np.float64)
    eigvals, eigvecs = np.linalg.eigh(q)
    if not (np.allclose(q, q.T) and np.all(eigvals > 0)):
        raise ValueError(f"noise_cov must be symmetric positive definite, got eigenvalues {eigvals}")
    as_f32 = functools.partial(jnp.asarray, dtype=jnp.float32)
    return GaussianTransition(as_f32(matrix), as_f32(noise_cov), as_f32(eigvals), as_f32(eigvecs))


def surrogate_transition(system: GaussianTransition, config: SurgeConfig) -> tuple[np.ndarray, np.ndarray]:
    """(F [D, D], P [D, D]) float64: the reverse chain of `config` run on `system`'s exact score samples
    z_0 | x_n ~ N(F x_n, P), exactly (the prior kernel of `surge.prior_mean`, moments propagated in closed form).

    Each step is z_{k−1} = z_k + (½β_k z_k + β_k ∇log p_{s_k}(z_k | x_n)) Δ + √(β_k Δ) ξ, linear in (z_k, x_n):
    z_{k−1} = J z_k + B x_n + noise with J = I + Δβ_k(½I − Σ_k⁻¹), B = Δβ_k α_k Σ_k⁻¹ A, Σ_k = α_k² Q + σ_k² I.
    """
    a = np.asarray(system.matrix, np.float64)
    q = np.asarray(system.noise_cov, np.float64)
    dim = a.shape[0]
    schedule = vp_schedule(config)
    eye = np.eye(dim)
    mean_map = np.zeros((dim, dim))           # E[z_k | x_n] = mean_map @ x_n (z_K's mean is 0)
    cov = config.prior_std**2 * eye           # Cov[z_k | x_n]
    for k in range(config.num_steps, 0, -1):
        beta, alpha, sigma = schedule.betas[k], schedule.alphas[k], schedule.sigmas[k]
        precision = np.linalg.inv(alpha**2 * q + sigma**2 * eye)
        jump = eye + schedule.delta * beta * (0.5 * eye - precision)
        pull = schedule.delta * beta * alpha * precision @ a
        mean_map = jump @ mean_map + pull
        cov = jump @ cov @ jump.T + beta * schedule.delta * eye
    return mean_map, 0.5 * (cov + cov.T)
