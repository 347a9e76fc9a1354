"""The Factorised Saliency Model of pruning at initialisation and the graphon it predicts.

Paper: Pham, Ta, Tran-Thanh, "Pruning at Initialisation through the lens of Graphon Limit" (ICML 2026,
arXiv 2602.06675). The paper's code was not available; the model below is a **reconstruction** from the
abstract and the zoo's design notes.

Model. A dense layer's kernel W [n_in, n_out] (Flax layout: row j = input neuron j, column i = output
neuron i) gets a saliency per weight that factorises as

    s_ji = ε_ji · v_j · u_i,    ε_ji i.i.d. (the edge noise: |w| for Magnitude, |w · ρ| for SNIP, ...),

with an input-neuron factor v_j and an output-neuron factor u_i (for SNIP, s = |W ⊙ ∂L/∂W| with
∂L/∂W_ji = E_n[a_nj δ_ni], v_j is the scale of the activation a_j and u_i that of the back-propagated signal
δ_i). A mask keeps s_ji ≥ t. Placing the neurons at latent positions ξ, ζ ∈ [0, 1] by decreasing factor
(ξ = 0 the largest v, the convention of `stats.empirical_graphon`, which sorts by decreasing degree), the
mask converges as the width grows to the bipartite graphon

    W(ξ, ζ) = P(ε ≥ t / (v(ξ) u(ζ))),    t such that ∫∫ W = density,

where v(ξ), u(ζ) are the decreasing quantile functions of the factor laws. For Gaussian ε = |w|,
w ~ N(0, σ²) this is 2[1 − Φ(t / (σ v u))]. Random (ε ~ U(0, 1)) and Magnitude (ε = |w|) have no neuron
factor (u = v = 1), so W is the constant graphon W = density: they are *homogeneous*. SNIP and GraSP are
*heterogeneous*: their factors vary from neuron to neuron.

Estimating the factors (reconstruction). `fit_factorised_saliency` fits the model to a score matrix by the
two-way decomposition of log|s|: log v_j and log u_i are the row and column means of log|s| less the grand
mean, and ε = s / (v u) is the residual, whose empirical law (sign included: GraSP's kept score θ ⊙ Hg is
signed) stands in for the law of ε. `r2` is the share of the variance of log|s| the two factors explain
(1 for an exactly factorised score, 0 for a homogeneous one).

Distances. Both graphons are compared as G×G step functions on [0, 1]²: the L2 distance
sqrt(mean (A − B)²) and the cut norm of A − B, max over unions of row cells S and column cells T of
|∫_{S×T} (A − B)|, exact for step functions with equal cells (the integrand is linear in each cell's
membership, so the optimum takes whole cells). Both use the degree-sorted alignment of the two graphons, so
they bound the cut distance (a minimum over rearrangements) from above.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from icml26zoo.validation import check_choice, check_int, check_interval

HOMOGENEOUS = ("random", "magnitude")  # no neuron factor: the predicted graphon is constant
HETEROGENEOUS = ("snip", "grasp")  # neuron factors fitted from the scores
METHODS = HOMOGENEOUS + HETEROGENEOUS
MAX_NOISE_SAMPLES = 1 << 18  # the law of ε is kept as at most this many sorted quantiles
MAX_CUT_CELLS = 16  # cut_norm enumerates the 2^G subsets of the smaller side


@dataclasses.dataclass(frozen=True)
class SaliencyFactors:
    """A fitted Factorised Saliency Model of one layer.

    input_factor: v [n_in] (> 0); output_factor: u [n_out] (> 0); noise: the sorted residuals ε [N] (N ≤
    MAX_NOISE_SAMPLES, evenly spaced quantiles of the n_in · n_out residuals); r2: the share of var(log|s|)
    explained by the two factors.
    """

    input_factor: np.ndarray
    output_factor: np.ndarray
    noise: np.ndarray
    r2: float


def _check_matrix(field: str, matrix: object) -> np.ndarray:
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim != 2 or min(m.shape) < 2:
        raise ValueError(f"{field} must be a 2-D [n_in, n_out] matrix with both sides >= 2, got shape {m.shape}")
    if not np.all(np.isfinite(m)):
        raise ValueError(f"{field} must be finite")
    return m


def fit_factorised_saliency(scores: np.ndarray) -> SaliencyFactors:
    """Fit s_ji = ε_ji v_j u_i to a layer's kept-largest saliencies s [n_in, n_out] (module docstring).

    Exact zeros (a neuron dead on the scoring batch) are read as the smallest non-zero |s|, so that log|s| is
    finite and their factor is tiny rather than undefined.
    """
    s = _check_matrix("scores", scores)
    mag = np.abs(s)
    positive = mag[mag > 0]
    if positive.size == 0:
        raise ValueError("scores are all zero: there is no saliency to factorise")
    log_mag = np.log(np.maximum(mag, positive.min()))
    grand = log_mag.mean()
    log_v = log_mag.mean(axis=1) - grand
    log_u = log_mag.mean(axis=0) - grand
    residual = log_mag - log_v[:, None] - log_u[None, :]
    total = log_mag.var()
    r2 = 1.0 - residual.var() / total if total > 0 else 0.0
    noise = np.sort((np.sign(s) * np.exp(residual)).ravel())
    if noise.size > MAX_NOISE_SAMPLES:  # evenly spaced order statistics keep the law's quantiles
        noise = noise[np.linspace(0, noise.size - 1, MAX_NOISE_SAMPLES).round().astype(np.int64)]
    return SaliencyFactors(np.exp(log_v), np.exp(log_u), noise, float(r2))


def _decreasing_quantiles(values: np.ndarray, points: int) -> np.ndarray:
    """The decreasing quantile function of `values` at the mid-points (k + 1/2) / points, k < points."""
    return np.quantile(values, 1.0 - (np.arange(points) + 0.5) / points)


def _survival(noise: np.ndarray, x: np.ndarray) -> np.ndarray:
    """P(ε ≥ x) under the empirical law of the sorted `noise`, elementwise over x."""
    return (noise.size - np.searchsorted(noise, x, side="left")) / noise.size


def predicted_graphon(factors: SaliencyFactors | None, density: float, *, grid: int = 8,
                      resolution: int = 128) -> np.ndarray:
    """The FSM's limiting graphon W(ξ, ζ) at `density`, averaged over a grid × grid array of equal cells.

    factors None is the homogeneous model (u = v = 1): the constant graphon `density`. Otherwise W is evaluated
    at `resolution` mid-quantiles per axis (rounded up to a multiple of grid) and t is found by bisection so
    that the mean of W is `density` (to the resolution of the law of ε). Returns [grid, grid].
    """
    density = check_interval("density", density, 0, 1, closed="neither")
    check_int("grid", grid)
    check_int("resolution", resolution)
    if factors is None:
        return np.full((grid, grid), density)
    points = grid * -(-resolution // grid)
    v = _decreasing_quantiles(factors.input_factor, points)
    u = _decreasing_quantiles(factors.output_factor, points)
    product = np.outer(v, u)  # [points, points] > 0
    noise = factors.noise
    bound = 2.0 * max(np.abs(noise).max(), 1e-300) * product.max()
    lo, hi = -bound, bound  # survival is 1 at t = lo and 0 at t = hi
    for _ in range(64):  # bound · 2^-64: far below the resolution of the law of ε
        mid = 0.5 * (lo + hi)
        if _survival(noise, mid / product).mean() > density:
            lo = mid
        else:
            hi = mid
    w = _survival(noise, hi / product)
    step = points // grid
    return w.reshape(grid, step, grid, step).mean(axis=(1, 3))


def method_graphon(method: str, density: float, factors: SaliencyFactors | None = None, *,
                   grid: int = 8, resolution: int = 128) -> np.ndarray:
    """The predicted graphon [grid, grid] of a PaI criterion: constant for Random/Magnitude, the fitted FSM
    graphon for SNIP/GraSP (which need `factors`)."""
    check_choice("method", method, METHODS)
    if method in HOMOGENEOUS:
        return predicted_graphon(None, density, grid=grid)
    if factors is None:
        raise ValueError(f"factors are required for the heterogeneous method {method!r}")
    return predicted_graphon(factors, density, grid=grid, resolution=resolution)


def cut_norm(matrix: np.ndarray) -> float:
    """Cut norm of the step function of `matrix` [G_r, G_c] (equal cells on [0, 1]²): max |Σ_{S×T} m| / (G_r G_c).

    Exact: every subset S of the smaller side is enumerated and T takes the columns of one sign.
    """
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim != 2 or m.size == 0:
        raise ValueError(f"matrix must be a non-empty 2-D array, got shape {m.shape}")
    if m.shape[0] > m.shape[1]:
        m = m.T
    if m.shape[0] > MAX_CUT_CELLS:
        raise ValueError(f"matrix must have a side of at most {MAX_CUT_CELLS} cells for the exact cut norm, "
                         f"got shape {m.shape}")
    subsets = np.array(list(itertools.product((0.0, 1.0), repeat=m.shape[0])))  # [2^G, G]
    sums = subsets @ m  # [2^G, G_c]: column sums over each row subset
    best = max(np.maximum(sums, 0).sum(axis=1).max(), np.maximum(-sums, 0).sum(axis=1).max())
    return float(best / m.size)


def graphon_distances(empirical: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    """{"l2": sqrt(mean (A − B)²), "cut": cut_norm(A − B)} of two graphons of the same grid."""
    a, b = np.asarray(empirical, dtype=np.float64), np.asarray(predicted, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"graphons must share a grid, got shapes {a.shape} and {b.shape}")
    diff = a - b
    return {"l2": float(np.sqrt(np.mean(diff ** 2))), "cut": cut_norm(diff)}
