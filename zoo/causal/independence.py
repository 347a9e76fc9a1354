"""Independence of the columns of a sample: the d-variable HSIC (dHSIC; Pfister, Bühlmann, Schölkopf, Peters,
"Kernel-based tests for joint independence", arXiv 1603.00285) with one Gaussian kernel per column and its
permutation test, and the sum of pairwise unbiased HSICs.

NOTIME (Berrevoets et al., AISTATS 2025) minimises "a measure of joint independence" of the residuals; which one
is not known (no code was found), so the measures here, on *standardised* columns with Gaussian kernels, are a
RECONSTRUCTION (docs/papers/notime.md; the fit uses the pairwise sum by default). Standardising each column first
makes both measures invariant to per-column affine rescaling; the median-heuristic bandwidth is computed from the
(standardised) sample it is applied to.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.validation import check_int

__all__ = ["MEASURES", "dhsic", "dhsic_permutation_test", "gaussian_grams", "independence_measure", "median_bandwidths",
           "pairwise_hsic", "standardise"]

MEASURES = ("dhsic", "pairwise_hsic")

_EPS = 1e-8


def standardise(x: jax.Array) -> jax.Array:
    """Each column of x [n, d] shifted to mean 0 and scaled to standard deviation 1 (a constant column stays 0)."""
    centred = x - jnp.mean(x, axis=0)
    return centred / jnp.sqrt(jnp.mean(centred**2, axis=0) + _EPS)


def _squared_distances(x: jax.Array) -> jax.Array:
    """[d, n, n] squared distances between the n values of each of the d columns of x [n, d]."""
    return (x.T[:, :, None] - x.T[:, None, :]) ** 2


def median_bandwidths(x: jax.Array) -> jax.Array:
    """[d] median heuristic per column of x [n, d]: the median of the off-diagonal squared distances (treated as a
    constant: no gradient flows through the bandwidth)."""
    n = x.shape[0]
    off = np.flatnonzero(~np.eye(n, dtype=bool).reshape(-1))  # static indices
    sq = jax.lax.stop_gradient(_squared_distances(x)).reshape(x.shape[1], -1)
    med = jnp.median(sq[:, off], axis=1)
    return jnp.maximum(med, _EPS)


def gaussian_grams(x: jax.Array, bandwidths: jax.Array | None = None) -> jax.Array:
    """[d, n, n] Gram matrices K_j[a, b] = exp(−(x_aj − x_bj)² / σ_j²) of x [n, d]; σ_j² = `bandwidths` [d] or
    the median heuristic (the convention of the dHSIC R package: exp(−‖·‖² / median ‖·‖²))."""
    sq = _squared_distances(x)
    scale = median_bandwidths(x) if bandwidths is None else bandwidths
    return jnp.exp(-sq / scale[:, None, None])


def dhsic(x: jax.Array, *, bandwidths: jax.Array | None = None, standardize: bool = True) -> jax.Array:
    """The biased (V-statistic) dHSIC of the d columns of x [n, d] (scalar >= 0, 0 iff the empirical joint kernel
    embedding factorises):
      (1/n²) Σ_ab Π_j K_j[a,b] + Π_j (1/n²) Σ_ab K_j[a,b] − (2/n) Σ_a Π_j (1/n) Σ_b K_j[a,b].
    With `standardize` each column is standardised first (scale invariance)."""
    x = standardise(x) if standardize else x
    grams = gaussian_grams(x, bandwidths)
    joint = jnp.mean(jnp.prod(grams, axis=0))
    product = jnp.prod(jnp.mean(grams, axis=(1, 2)))
    cross = 2.0 * jnp.mean(jnp.prod(jnp.mean(grams, axis=2), axis=0))
    return joint + product - cross


def pairwise_hsic(x: jax.Array, *, bandwidths: jax.Array | None = None, standardize: bool = True) -> jax.Array:
    """Σ_{i<j} HSIC_u(x_i, x_j) over the d columns of x [n, d] (n >= 4), each pair by the unbiased estimator of
    Song et al. (2012, "Feature selection via dependence maximization"; K̃ = Gram with zero diagonal):
      [tr(K̃ L̃) + 1ᵀK̃1 · 1ᵀL̃1 / ((n−1)(n−2)) − 2/(n−2) · 1ᵀK̃L̃1] / (n(n−3)).
    Every pair is penalised on its own, and the estimator has no 1/n bias that depends on the marginals, so a fit
    cannot lower it by reshaping a residual's distribution or by making one residual depend on others (the joint
    V-statistic dHSIC can be lowered both ways at n of a few hundred; docs/papers/notime.md). Mean 0 under
    independence, so it can be slightly negative."""
    x = standardise(x) if standardize else x
    n = x.shape[0]
    grams = gaussian_grams(x, bandwidths) * (1.0 - jnp.eye(n, dtype=x.dtype))
    rows = jnp.sum(grams, axis=2)  # [d, n]
    totals = jnp.sum(rows, axis=1)  # [d]
    trace = jnp.einsum("iab,jab->ij", grams, grams)
    pairs = (trace + jnp.outer(totals, totals) / ((n - 1) * (n - 2)) - 2.0 / (n - 2) * rows @ rows.T) / (n * (n - 3))
    return 0.5 * (jnp.sum(pairs) - jnp.trace(pairs))


def independence_measure(name: str, x: jax.Array, *, bandwidths: jax.Array | None = None) -> jax.Array:
    """`name` ("dhsic" or "pairwise_hsic") of the standardised columns of x [n, d]."""
    return (dhsic if name == "dhsic" else pairwise_hsic)(x, bandwidths=bandwidths)


def dhsic_permutation_test(x: jax.Array, key: jax.Array, *, num_permutations: int = 100) -> tuple[jax.Array,
                                                                                                  jax.Array]:
    """(statistic, p-value) of the permutation test of joint independence of the columns of x [n, d]: every column
    but the first is permuted independently, which leaves the marginals (and so the median bandwidths, computed
    once) unchanged and breaks any dependence; p = (1 + #{permuted >= observed}) / (1 + num_permutations)."""
    check_int("num_permutations", num_permutations)
    return _permutation_test(x, key, num_permutations)


@functools.partial(jax.jit, static_argnums=2)
def _permutation_test(x: jax.Array, key: jax.Array, num_permutations: int) -> tuple[jax.Array, jax.Array]:
    z = standardise(x)
    bandwidths = median_bandwidths(z)
    statistic = dhsic(z, bandwidths=bandwidths, standardize=False)

    def permuted(k: jax.Array) -> jax.Array:
        keys = jax.random.split(k, z.shape[1])
        columns = [z[:, 0]] + [jax.random.permutation(keys[j], z[:, j]) for j in range(1, z.shape[1])]
        return dhsic(jnp.stack(columns, axis=1), bandwidths=bandwidths, standardize=False)

    null = jax.lax.map(permuted, jax.random.split(key, num_permutations))
    exceed = jnp.sum(null >= statistic).astype(statistic.dtype)
    return statistic, (1.0 + exceed) / (1.0 + num_permutations)
