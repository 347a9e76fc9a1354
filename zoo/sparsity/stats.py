"""Mask statistics of the graphon view of pruning at initialisation (Pham, Ta, Tran-Thanh, arXiv 2602.06675).

Each prunable weight matrix W [n_in, n_out] (Flax layout: h = a @ W, so row j is input neuron j and
column i is output neuron i; a higher-rank kernel is read as [prod(shape[:-1]), shape[-1]]) with mask
M ∈ {0,1}^{n_in×n_out} is a bipartite graph between input and output neurons:

  * out-degree of input neuron j:  d_j^out = Σ_i M_ji (row sums, [n_in]);
  * in-degree of output neuron i:  d_i^in  = Σ_j M_ji (column sums, [n_out]);
  * density p = Σ M / (n_in n_out) = mean(d^out) / n_out = mean(d^in) / n_in.

Random and Magnitude masks converge to the constant graphon W(ξ, ζ) = p, SNIP/GraSP to heterogeneous ones.
The empirical graphon sorts rows by out-degree and columns by in-degree (both descending) and averages M
over a G×G grid of (row-rank, column-rank) cells; its homogeneity score is the variance of the G² cell
densities. For a constant graphon the cells differ only by noise: each is a mean of c = n_in n_out / G²
Bernoulli(p) entries (variance p(1 − p)/c), and sorting by degree spreads the row and column blocks by
about the variance of a row's and a column's density, p(1 − p)/n_out and p(1 − p)/n_in. Their sum
p(1 − p)(1/c + 1/n_in + 1/n_out) is `null_var`, the homogeneity a constant graphon of the same density
and shape should show (a reference within tens of percent, not a test statistic); heterogeneous masks sit
far above it.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from icml26zoo.sparsity.masks import is_stacked, path_str


def _units(mask: Any) -> list[tuple[str, np.ndarray]]:
    """(name, 2-D bool matrix) per layer: array mask leaves of rank >= 2, stacked leaves split per slice."""
    units = []
    for path, m in jax.tree_util.tree_flatten_with_path(mask)[0]:
        if isinstance(m, bool):  # a leaf that is never pruned
            continue
        m = np.asarray(m, dtype=bool)
        name = path_str(path)
        if is_stacked(path) and m.ndim >= 3:
            units += [(f"{name}[{layer}]", s.reshape(-1, s.shape[-1])) for layer, s in enumerate(m)]
        elif m.ndim >= 2:
            units.append((name, m.reshape(-1, m.shape[-1])))
        elif m.ndim == 1:  # a pruned vector is a 1 × n graph
            units.append((name, m[None, :]))
    return units


def empirical_graphon(m: np.ndarray, grid: int = 8) -> np.ndarray:
    """G×G cell densities of M [n_in, n_out] after sorting rows/columns by degree (G = min(grid, n_in, n_out)).

    Cells are the near-equal blocks of `np.array_split`; ties in degree keep the original order (stable sort).
    """
    m = np.asarray(m, dtype=np.float64)
    rows = np.argsort(-m.sum(axis=1), kind="stable")
    cols = np.argsort(-m.sum(axis=0), kind="stable")
    m = m[rows][:, cols]
    g_r, g_c = min(grid, m.shape[0]), min(grid, m.shape[1])
    row_blocks = np.array_split(np.arange(m.shape[0]), g_r)
    col_blocks = np.array_split(np.arange(m.shape[1]), g_c)
    return np.array([[m[np.ix_(r, c)].mean() for c in col_blocks] for r in row_blocks])


def degree_histogram(degrees: np.ndarray, n_other: int, bins: int = 10) -> np.ndarray:
    """Counts of normalised degrees d / n_other over `bins` equal bins of [0, 1] (int [bins])."""
    return np.histogram(np.asarray(degrees) / max(n_other, 1), bins=bins, range=(0.0, 1.0))[0]


def matrix_statistics(m: np.ndarray, *, grid: int = 8, bins: int = 10) -> dict[str, Any]:
    """Graphon-view statistics of one mask matrix M [n_in, n_out] (see the module docstring).

    Keys: size, kept (ints); density; out_degree [n_in], in_degree [n_out] (int arrays); out_degree_mean/var,
    in_degree_mean/var; out_degree_hist / in_degree_hist [bins]; graphon [G, G]; homogeneity (variance of
    the graphon's cells) and null_var (its constant-graphon reference, module docstring); active_inputs (the
    fraction of input neurons with non-zero out-degree, the paper's "active input coordinates").
    """
    m = np.asarray(m, dtype=bool)
    if m.ndim != 2:
        raise ValueError(f"mask matrix must be 2-D [n_in, n_out], got shape {m.shape}")
    n_in, n_out = m.shape
    out_deg = m.sum(axis=1).astype(np.int64)
    in_deg = m.sum(axis=0).astype(np.int64)
    kept = int(out_deg.sum())
    density = kept / m.size
    graphon = empirical_graphon(m, grid)
    cell = m.size / graphon.size  # mean entries per cell
    return {
        "size": int(m.size),
        "kept": kept,
        "density": float(density),
        "out_degree": out_deg,
        "in_degree": in_deg,
        "out_degree_mean": float(out_deg.mean()),
        "out_degree_var": float(out_deg.var()),
        "in_degree_mean": float(in_deg.mean()),
        "in_degree_var": float(in_deg.var()),
        "out_degree_hist": degree_histogram(out_deg, n_out, bins),
        "in_degree_hist": degree_histogram(in_deg, n_in, bins),
        "graphon": graphon,
        "homogeneity": float(graphon.var()),
        "null_var": float(density * (1.0 - density) * (1.0 / cell + 1.0 / n_in + 1.0 / n_out)),
        "active_inputs": float(np.mean(out_deg > 0)),
    }


def mask_statistics(mask: Any, *, grid: int = 8, bins: int = 10) -> dict[str, Any]:
    """Per-layer graphon statistics of a mask tree from `zoo.sparsity.masks` plus the totals.

    Returns {"layers": {name: matrix_statistics(...)}, "total": {"size", "kept", "density"}} where a layer
    is a pruned leaf, or one slice `name[l]` of a leaf stacked for scan; names are '/'-joined tree paths.
    Layer collapse under a global threshold shows as a layer density of 0.
    """
    layers = {name: matrix_statistics(m, grid=grid, bins=bins) for name, m in _units(mask)}
    size = sum(s["size"] for s in layers.values())
    kept = sum(s["kept"] for s in layers.values())
    return {"layers": layers, "total": {"size": size, "kept": kept, "density": kept / size if size else 0.0}}


def layer_densities(mask: Any) -> dict[str, float]:
    """{layer name: density} — the quick check for layer collapse."""
    return {name: float(m.mean()) for name, m in _units(mask)}
