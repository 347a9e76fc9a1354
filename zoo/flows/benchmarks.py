"""The spec's analytic benchmarks for inverse design, with their known answers.

- `LinearGaussian`: x ~ N(0, I_P), y = A x + sigma n. The posterior p(x | y*) is Gaussian in closed form, and so
  are the exact (oracle) velocity fields of both pairings, E[z1 - z0 | z_t], since every quantity is linear in
  the Gaussian latent w = (x [P], n [L], eps [P]). Under Diag-CFM's exact field the design block from
  (eps, y*) follows x_t = t mu + C_t^{1/2} eps with C_t = (1 - t)^2 I + t^2 Sigma (all C_t commute), and the
  label block is (1 - t) y*.
- `SmoothBenchmark`: x ~ N(0, I_P) and L = n_labels <= P/2 smooth nonlinear labels
      s_l(x) = x_a + sin(2 x_a) / 2 + x_a x_b / 2,   a = l, b = l + L   (before any reordering),
  standardised with their exact moments: mean 0 and variance 1 + 2 e^-2 + (1 - e^-8)/8 + 1/4 (Stein's lemma:
  E[x sin 2x] = 2 e^-2; E[sin^2 2x] = (1 - e^-8)/2). `permutation` reorders the design coordinates, which
  standard CFM's pairing notices and Diag-CFM's does not.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.flows.pairs import Velocity, check_pairing
from icml26zoo.validation import check_int, check_positive

__all__ = ["LinearGaussian", "SmoothBenchmark", "smooth_label_std"]


@dataclasses.dataclass(frozen=True)
class LinearGaussian:
    """y = A x + sigma n with A [L, P] (a numpy array), x ~ N(0, I_P), n ~ N(0, I_L)."""

    a: np.ndarray
    sigma: float

    def __post_init__(self) -> None:
        if np.ndim(self.a) != 2 or 0 in np.shape(self.a):
            raise ValueError(f"a must be a matrix [L, P] with L, P >= 1, got shape {np.shape(self.a)}")
        check_positive("sigma", self.sigma)  # the label noise

    @property
    def shape(self) -> tuple[int, int]:
        """(P, L)."""
        return self.a.shape[1], self.a.shape[0]

    def sample(self, key: jax.Array, rows: int) -> tuple[jax.Array, jax.Array]:
        """rows pairs: x [rows, P], y [rows, L] (float32)."""
        p, n_labels = self.shape
        x_key, n_key = jax.random.split(key)
        x = jax.random.normal(x_key, (rows, p))
        return x, x @ jnp.asarray(self.a.T, jnp.float32) + self.sigma * jax.random.normal(n_key, (rows, n_labels))

    def posterior(self, y_target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """p(x | y*): means [B, P] for y_target [B, L] and the shared covariance [P, P] (float64)."""
        a = np.asarray(self.a, np.float64)
        gain = a.T @ np.linalg.inv(a @ a.T + self.sigma**2 * np.eye(a.shape[0]))
        return np.asarray(y_target, np.float64) @ gain.T, np.eye(a.shape[1]) - gain @ a

    def endpoint_maps(self, pairing: str) -> tuple[np.ndarray, np.ndarray]:
        """E0, E1 [D, 2P + L] with z0 = E0 w and z1 = E1 w for the latent w = (x, n, eps)."""
        check_pairing(pairing)
        p, n_labels = self.shape
        a = np.asarray(self.a, np.float64)
        label = np.concatenate([a, self.sigma * np.eye(n_labels), np.zeros((n_labels, p))], axis=1)
        design = np.concatenate([np.eye(p), np.zeros((p, n_labels + p))], axis=1)
        noise = np.concatenate([np.zeros((p, p + n_labels)), np.eye(p)], axis=1)
        if pairing == "diag":
            return np.concatenate([noise, label]), np.concatenate([design, np.zeros((n_labels, 2 * p + n_labels))])
        return np.concatenate([label, noise[: p - n_labels]]), design

    def oracle_velocity(self, pairing: str) -> Velocity:
        """The exact field E[z1 - z0 | z_t = z] = N M_t^T (M_t M_t^T)^-1 z with M_t = (1 - t) E0 + t E1 and
        N = E1 - E0; singular at t = 1 for Diag-CFM (the label block's 0/0), so evaluate it at t < 1."""
        e0, e1 = (jnp.asarray(m, jnp.float32) for m in self.endpoint_maps(pairing))

        def one_row(z: jax.Array, t: jax.Array) -> jax.Array:
            m = (1 - t) * e0 + t * e1
            return (e1 - e0) @ m.T @ jnp.linalg.solve(m @ m.T, z)

        return jax.vmap(one_row)

    def exact_design_path(self, y_target: np.ndarray, eps: np.ndarray, t: float) -> np.ndarray:
        """Diag-CFM's exact flow: the design block [B, P] at time t from (eps, y*) at t = 0 (float64)."""
        mean, cov = self.posterior(y_target)
        values, vectors = np.linalg.eigh((1 - t) ** 2 * np.eye(cov.shape[0]) + t**2 * cov)
        root = vectors @ np.diag(np.sqrt(np.clip(values, 0, None))) @ vectors.T
        return t * mean + np.asarray(eps, np.float64) @ root


def smooth_label_std() -> float:
    """The exact standard deviation of every raw label s_l(x) of `SmoothBenchmark` under x ~ N(0, I)."""
    return math.sqrt(1 + 2 * math.exp(-2) + (1 - math.exp(-8)) / 8 + 0.25)


@dataclasses.dataclass(frozen=True)
class SmoothBenchmark:
    """P design coordinates (reordered by `permutation`, a tuple of 0..P-1, if given) and L smooth labels."""

    p: int
    n_labels: int
    permutation: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        check_int("n_labels", self.n_labels)
        check_int("p", self.p)
        if self.p < 2 * self.n_labels:
            raise ValueError(f"p must be >= 2 n_labels (each label reads two coordinates of its own), got p = "
                             f"{self.p}, n_labels = {self.n_labels}")
        if self.permutation is not None and sorted(self.permutation) != list(range(self.p)):
            raise ValueError(f"permutation must be a tuple holding 0 .. {self.p - 1} once each, got "
                             f"{self.permutation!r}")

    def coordinates(self) -> tuple[np.ndarray, np.ndarray]:
        """Where the coordinates a_l, b_l of every label sit in the (reordered) design vector: two [L] arrays.
        Design coordinate i holds original coordinate permutation[i]."""
        a, b = np.arange(self.n_labels), np.arange(self.n_labels) + self.n_labels
        if self.permutation is None:
            return a, b
        position = np.argsort(np.asarray(self.permutation))
        return position[a], position[b]

    def simulate(self, x: jax.Array) -> jax.Array:
        """Standardised labels s(x) / std [B, L] of designs x [B, P]."""
        if jnp.ndim(x) != 2 or x.shape[1] != self.p:
            raise ValueError(f"x must be designs of shape [B, {self.p}], got shape {jnp.shape(x)}")
        a, b = self.coordinates()
        xa, xb = x[:, a], x[:, b]
        return (xa + 0.5 * jnp.sin(2 * xa) + 0.5 * xa * xb) / smooth_label_std()

    def sample(self, key: jax.Array, rows: int) -> tuple[jax.Array, jax.Array]:
        """rows pairs: x [rows, P] ~ N(0, I), y = simulate(x) [rows, L]."""
        x = jax.random.normal(key, (rows, self.p))
        return x, self.simulate(x)
