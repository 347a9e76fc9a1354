"""Rounding a linear layer's weights onto the b-bit grid: round-to-nearest, GPTQ, LDLQ and YAQA's two-sided LDLQ.

Orientation: W [m, n] with rows = outputs (y = W x; a flax kernel is Wᵀ). Each method returns Ŵ [m, n] on the
row grid of `grid.round_to_grid` with the given per-row steps [m]. Proxy losses:

- layer proxy (GPTQ / LDLQ): tr(ΔW H_in ΔWᵀ), ΔW = W − Ŵ, H_in [n, n] = E[x xᵀ];
- Kronecker proxy (YAQA): tr(ΔWᵀ H_out ΔW H_in), H_out [m, m], H_in [n, n].

LDLQ (QuIP, Chee et al. 2023) processes input columns from the last to the first: with H = L D Lᵀ (L unit
lower triangular) and L̃ = L − I, column k rounds W_{:,k} + (ΔW L̃)_{:,k}, the linear feedback of the rounding
errors of the columns already done (k' > k). Writing R for the per-entry rounding residuals gives
ΔW (I + L̃) = R, so the proxy loss is Σ_k D_kk ‖R_{:,k}‖²: the feedback whitens the errors. GPTQ (Frantar et
al. 2023) is the same algorithm in the other column order, written with the Cholesky factor of H⁻¹.

YAQA (Tseng, Sun, De Sa, "Model-Preserving Adaptive Rounding", ICML 2026, arXiv 2505.22988) uses both factors:
with H_out = L_o D_o L_oᵀ and H_in = L_i D_i L_iᵀ, each entry (i, j) rounds
W_ij + [(I + L̃_o)ᵀ ΔW (I + L̃_i)]_ij with ΔW_ij itself still 0, visiting entries along anti-diagonals from
the bottom-right corner (decreasing i + j), so every entry the feedback reads (k ≥ i, l ≥ j, not both equal)
is already rounded; then (I + L̃_o)ᵀ ΔW (I + L̃_i) = R and the loss is Σ D_o,ii D_i,jj R_ij². With
H_out = I it is LDLQ with H_in. This is a reconstruction from the paper's description with element tiles
(td = 1) and no Hadamard incoherence processing; the numbers are computed in float64 NumPy on the host.
"""

from __future__ import annotations

import numpy as np

from icml26zoo.quant.grid import check_bits, round_to_grid

__all__ = ["DAMPING", "gptq_round", "kron_proxy_loss", "ldl_lower", "ldlq_round", "prepare_hessian",
           "proxy_loss", "rtn_round", "yaqa_round"]

# Relative damping σ added to a mean-diagonal-normalised Hessian, grown tenfold until the Cholesky
# factorisation succeeds.
DAMPING = 1e-2


def rtn_round(w: np.ndarray, steps: np.ndarray, bits: int) -> np.ndarray:
    """Round-to-nearest: w [m, n] -> Ŵ [m, n], every entry independently onto its row's grid."""
    w = _check_matrix("w", w)
    return round_to_grid(w, _check_steps(steps, w.shape[0]), check_bits(bits))


def prepare_hessian(h: np.ndarray, *, damping: float = DAMPING, name: str = "h") -> np.ndarray:
    """A symmetric PSD h [n, n] divided by its mean diagonal plus σ I, σ = damping · 10^j for the first j ≥ 0
    at which it is positive definite. Scaling h does not change the rounding; it fixes the damping's scale."""
    h = _check_square(name, h)
    h = (h + h.T) / 2
    mean_diag = float(np.mean(np.diag(h)))
    h = h / mean_diag if mean_diag > 0 else np.eye(h.shape[0])
    for power in range(12):
        damped = h + damping * 10.0**power * np.eye(h.shape[0])
        try:
            np.linalg.cholesky(damped)
            return damped
        except np.linalg.LinAlgError:
            continue
    raise ValueError(f"{name} could not be made positive definite by damping up to {damping * 1e11:g}")


def ldl_lower(h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """h [n, n] positive definite -> (L unit lower triangular [n, n], d [n] > 0) with h = L diag(d) Lᵀ."""
    chol = np.linalg.cholesky(h)
    diag = np.diag(chol)
    return chol / diag[None, :], diag**2


def ldlq_round(
    w: np.ndarray, h_in: np.ndarray, steps: np.ndarray, bits: int, *, damping: float = DAMPING
) -> np.ndarray:
    """LDLQ: w [m, n], h_in [n, n] (symmetric PSD), steps [m] -> Ŵ [m, n], last input column first."""
    w = _check_matrix("w", w)
    steps, bits = _check_steps(steps, w.shape[0]), check_bits(bits)
    lower, _ = ldl_lower(prepare_hessian(_match("h_in", h_in, w.shape[1]), damping=damping, name="h_in"))
    feedback = lower - np.eye(w.shape[1])
    rounded, error = np.zeros_like(w), np.zeros_like(w)
    for k in range(w.shape[1] - 1, -1, -1):
        target = w[:, k] + error @ feedback[:, k]
        rounded[:, k] = round_to_grid(target, steps, bits)
        error[:, k] = w[:, k] - rounded[:, k]
    return rounded


def gptq_round(
    w: np.ndarray, h_in: np.ndarray, steps: np.ndarray, bits: int, *, damping: float = DAMPING
) -> np.ndarray:
    """GPTQ as published: first column first, each column's scaled error spread over the later columns with
    the upper Cholesky factor U of H⁻¹ (H⁻¹ = Uᵀ U). w [m, n], h_in [n, n], steps [m] -> Ŵ [m, n]."""
    w = _check_matrix("w", w).copy()
    steps, bits = _check_steps(steps, w.shape[0]), check_bits(bits)
    h = prepare_hessian(_match("h_in", h_in, w.shape[1]), damping=damping, name="h_in")
    upper = np.linalg.cholesky(np.linalg.inv(h)).T
    rounded = np.zeros_like(w)
    for k in range(w.shape[1]):
        rounded[:, k] = round_to_grid(w[:, k], steps, bits)
        scaled_error = (w[:, k] - rounded[:, k]) / upper[k, k]
        w[:, k + 1:] -= np.outer(scaled_error, upper[k, k + 1:])
    return rounded


def yaqa_round(w: np.ndarray, h_in: np.ndarray, h_out: np.ndarray, steps: np.ndarray, bits: int, *,
               damping: float = DAMPING) -> np.ndarray:
    """YAQA's two-sided LDLQ: w [m, n], h_in [n, n], h_out [m, m] (symmetric PSD), steps [m] -> Ŵ [m, n].

    Anti-diagonals d = m + n − 2 .. 0; on each, row i holds at most one entry (i, d − i), rounded together.
    S = ΔW (I + L̃_i) is kept up to date, so the feedback of entry (i, j) is ((I + L̃_o)ᵀ S)_ij.
    """
    w = _check_matrix("w", w)
    m, n = w.shape
    steps, bits = _check_steps(steps, m), check_bits(bits)
    lower_in, _ = ldl_lower(prepare_hessian(_match("h_in", h_in, n), damping=damping, name="h_in"))
    lower_out, _ = ldl_lower(prepare_hessian(_match("h_out", h_out, m), damping=damping, name="h_out"))
    rounded = np.zeros_like(w)
    right = lower_in  # I + L̃_i
    left_t = lower_out.T  # (I + L̃_o)ᵀ
    s = np.zeros_like(w)
    rows_all = np.arange(m)
    for d in range(m + n - 2, -1, -1):
        cols = d - rows_all
        valid = (cols >= 0) & (cols < n)
        rows, cols = rows_all[valid], cols[valid]
        feedback = np.einsum("ik,ki->i", left_t[rows], s[:, cols])
        target = w[rows, cols] + feedback
        rounded[rows, cols] = round_to_grid(target, steps[rows], bits)
        error = w[rows, cols] - rounded[rows, cols]
        s[rows] += error[:, None] * right[cols]
    return rounded


def proxy_loss(w: np.ndarray, w_hat: np.ndarray, h_in: np.ndarray) -> float:
    """The layer proxy tr(ΔW H_in ΔWᵀ) of ΔW = w − w_hat [m, n] with h_in [n, n]."""
    delta = np.asarray(w, np.float64) - np.asarray(w_hat, np.float64)
    return float(np.einsum("ij,jk,ik->", delta, h_in, delta))


def kron_proxy_loss(w: np.ndarray, w_hat: np.ndarray, h_in: np.ndarray, h_out: np.ndarray) -> float:
    """The Kronecker proxy tr(ΔWᵀ H_out ΔW H_in) of ΔW = w − w_hat [m, n], h_in [n, n], h_out [m, m]."""
    delta = np.asarray(w, np.float64) - np.asarray(w_hat, np.float64)
    return float(np.trace(delta.T @ h_out @ delta @ h_in))


def _check_matrix(name: str, value: np.ndarray) -> np.ndarray:
    array = np.asarray(value, np.float64)
    if array.ndim != 2 or not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be a finite matrix [m, n], got shape {array.shape}")
    return array


def _check_square(name: str, value: np.ndarray) -> np.ndarray:
    array = _check_matrix(name, value)
    if array.shape[0] != array.shape[1]:
        raise ValueError(f"{name} must be square, got shape {array.shape}")
    return array


def _match(name: str, value: np.ndarray, size: int) -> np.ndarray:
    array = _check_square(name, value)
    if array.shape != (size, size):
        raise ValueError(f"{name} must have shape ({size}, {size}) to match w, got {array.shape}")
    return array


def _check_steps(steps: np.ndarray, rows: int) -> np.ndarray:
    array = np.asarray(steps, np.float64)
    if array.shape != (rows,) or not np.all(array > 0) or not np.all(np.isfinite(array)):
        raise ValueError(f"steps must be {rows} finite positive row steps [m], got shape {array.shape}")
    return array
