"""Statistics D1-D6 (Sun et al., arXiv 2603.05498) over captured activations (numpy in, plain dicts out).

Every function is pure and takes arrays from `capture_forward` (converted with np.asarray); none touches
the model. Shapes: L layers, B batch rows, T tokens, D channels, H heads.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def massive_activations(
    hidden: np.ndarray, tokens: np.ndarray, *, top_k: int = 8, tau_abs: float = 100.0, tau_rel: float = 1000.0
) -> dict[str, Any]:
    """D1 (after Sun et al. 2024): the top-k entries of |h^l| over (row, token, channel) per layer.

    hidden [L', B, T, D] (L' = L+1 residual streams), tokens [B, T]. An entry is flagged "massive" when
    |h| > tau_abs and |h| > tau_rel * median|h^l|. Returns:
      top_value [L', k] (signed), top_abs [L', k], top_row / top_pos / top_token / top_channel [L', k] int,
      median [L'], ratio [L', k] (|h| / median), max_ratio [L'], flagged [L', k] bool,
      max_by_channel [L', D] (max |h| over rows and tokens), max_by_token [L', B, T] (max over channels),
      flagged_entries: list of (layer, row, pos, token_id, channel, value) for every flagged entry.
    """
    h = np.asarray(hidden, np.float32)
    n_layers, batch, length, dim = h.shape
    k = min(top_k, batch * length * dim)
    mag = np.abs(h).reshape(n_layers, -1)
    order = np.argsort(-mag, axis=1, kind="stable")[:, :k]
    top_abs = np.take_along_axis(mag, order, axis=1)
    row, pos, channel = np.unravel_index(order, (batch, length, dim))
    median = np.median(mag, axis=1)
    # A zero median (e.g. an all-zero stream) makes every nonzero entry infinitely "massive"; keep it finite.
    ratio = top_abs / np.maximum(median, np.finfo(np.float32).tiny)[:, None]
    flagged = (top_abs > tau_abs) & (ratio > tau_rel)
    tok = np.asarray(tokens)[row, pos]
    top_value = h.reshape(n_layers, -1)[np.arange(n_layers)[:, None], order]
    entries = [
        (int(lay), int(row[lay, i]), int(pos[lay, i]), int(tok[lay, i]), int(channel[lay, i]), float(top_value[lay, i]))
        for lay, i in zip(*np.nonzero(flagged), strict=True)
    ]
    return {
        "top_value": top_value,
        "top_abs": top_abs,
        "top_row": row,
        "top_pos": pos,
        "top_token": tok,
        "top_channel": channel,
        "median": median,
        "ratio": ratio,
        "max_ratio": ratio[:, 0],
        "flagged": flagged,
        "max_by_channel": np.abs(h).max(axis=(1, 2)),
        "max_by_token": np.abs(h).max(axis=3),
        "flagged_entries": entries,
    }


def life_cycle(
    hidden: np.ndarray,
    attn_delta: np.ndarray,
    mlp_delta: np.ndarray,
    entries: list[tuple[int, int, int]],
    *,
    rel: float = 0.1,
) -> dict[str, np.ndarray]:
    """D2: the value of each (row, pos, channel) across layers and its per-layer attention/MLP increments.

    hidden [L+1, B, T, D], attn_delta / mlp_delta [L, B, T, D], entries n triples. Increments are signed
    along the spike's direction (the sign of its peak value), so positive means "grows the spike".
    A step-up block has an MLP increment that grows the spike, exceeds the attention increment in size and
    exceeds rel * |peak|; a step-down block has an MLP increment that shrinks it by more than rel * |peak|.
    Returns value [n, L+1], attn [n, L], mlp [n, L], step_up / step_down [n, L] bool, peak_layer [n].
    """
    idx = tuple(np.asarray(e, np.int64) for e in zip(*entries, strict=True)) if entries else None
    n_layers = np.asarray(attn_delta).shape[0]
    if idx is None:
        empty = np.zeros((0, n_layers))
        return {"value": np.zeros((0, n_layers + 1)), "attn": empty, "mlp": empty,
                "step_up": empty.astype(bool), "step_down": empty.astype(bool), "peak_layer": np.zeros(0, int)}
    value = np.asarray(hidden, np.float32)[:, idx[0], idx[1], idx[2]].T
    attn = np.asarray(attn_delta, np.float32)[:, idx[0], idx[1], idx[2]].T
    mlp = np.asarray(mlp_delta, np.float32)[:, idx[0], idx[1], idx[2]].T
    peak_layer = np.argmax(np.abs(value), axis=1)
    peak = value[np.arange(len(entries)), peak_layer]
    sign = np.where(peak < 0, -1.0, 1.0)[:, None]
    scale = rel * np.abs(peak)[:, None]
    s_attn, s_mlp = sign * attn, sign * mlp
    return {
        "value": value,
        "attn": attn,
        "mlp": mlp,
        "step_up": (s_mlp > scale) & (np.abs(s_mlp) > np.abs(s_attn)),
        "step_down": s_mlp < -scale,
        "peak_layer": peak_layer,
    }


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-30)


def _mean_offdiag_cosine(u: np.ndarray) -> float:
    """Mean cosine over distinct pairs of the unit rows of u [n, D]; nan for n < 2."""
    n = u.shape[0]
    if n < 2:
        return float("nan")
    gram = u @ u.T
    return float((gram.sum() - np.trace(gram)) / (n * (n - 1)))


def spike_token_geometry(hidden: np.ndarray, normed: np.ndarray, *, top_m: int = 4) -> dict[str, np.ndarray]:
    """D3: sparsity and near-constancy of the normalized spike token.

    hidden [L, B, T, D] picks the spike token of each (layer, row): the token holding the largest |h|.
    normed [L, B, T, D] is what the block's mixer receives (RMSNorm(h^l) under pre/sandwich placement).
    u = normed at the spike token / its norm. Returns spike_pos [L, B], top_m_energy [L, B] (energy fraction
    of u in its top_m channels), cosine_across_prompts [L] (mean pairwise cosine of u over rows),
    cosine_across_layers [B] (mean pairwise cosine of u over layers); ≈ 1 means a near-constant vector.
    """
    h = np.abs(np.asarray(hidden, np.float32))
    spike_pos = h.max(axis=3).argmax(axis=2)  # [L, B]
    n_layers, batch = spike_pos.shape
    x = np.asarray(normed, np.float32)
    u = _unit(x[np.arange(n_layers)[:, None], np.arange(batch)[None, :], spike_pos])  # [L, B, D]
    energy = np.sort(u**2, axis=-1)[..., ::-1][..., :top_m].sum(-1)
    return {
        "spike_pos": spike_pos,
        "top_m_energy": energy,
        "cosine_across_prompts": np.array([_mean_offdiag_cosine(u[lay]) for lay in range(n_layers)]),
        "cosine_across_layers": np.array([_mean_offdiag_cosine(u[:, b]) for b in range(batch)]),
    }


def key_mass(probs: np.ndarray, *, i0: int) -> np.ndarray:
    """a[l, b, h, j] = mean over queries i ≥ max(i0, j) of P[l, b, h, i, j]; probs [L, B, H, T, T].

    Queries before j cannot see key j (causal), so they are left out rather than counted as zeros; for the
    first token (j = 0) this is exactly the mean over i ≥ i0.
    """
    p = np.asarray(probs, np.float64)
    length = p.shape[-1]
    if not 0 <= i0 < length:
        raise ValueError(f"i0 must be in [0, T) = [0, {length}), got {i0}")
    rows = np.arange(length)
    keep = (rows[:, None] >= np.maximum(i0, rows)[None, :]).astype(np.float64)  # [i, j]
    return np.einsum("lbhij,ij->lbhj", p, keep) / keep.sum(axis=0)


def attention_sinks(probs: np.ndarray, *, i0: int = 16, eps: float = 0.3, top_k: int = 3) -> dict[str, Any]:
    """D4: attention mass on the first token and on each head's top keys (per layer, head; batch-averaged).

    probs [L, B, H, T, T]. Returns first_token_mass [L, H] (a_h(0), queries i ≥ i0), sink_rate (Gu et al.:
    fraction of (layer, head) with a_h(0) > eps), sink_rate_by_layer [L], key_mass [L, H, T],
    top_keys [L, H, k] (key positions by mass), top_key_mass [L, H, k].
    """
    mass = key_mass(probs, i0=i0).mean(axis=1)  # [L, H, T]
    k = min(top_k, mass.shape[-1])
    top = np.argsort(-mass, axis=-1, kind="stable")[..., :k]
    first = mass[..., 0]
    return {
        "first_token_mass": first,
        "sink_rate": float(np.mean(first > eps)),
        "sink_rate_by_layer": np.mean(first > eps, axis=1),
        "key_mass": mass,
        "top_keys": top,
        "top_key_mass": np.take_along_axis(mass, top, axis=-1),
    }


def slot_mass(sink_probs: np.ndarray, *, i0: int = 16) -> np.ndarray:
    """Mean weight on an explicit sink slot over queries i ≥ i0, batch-averaged: sink_probs [L, B, H, T] -> [L, H].

    The slot is the attention mixer's learnable / softmax-plus-one sink (capture's sink_probs), the
    architectural counterpart of the first-token mass a_h(0).
    """
    p = np.asarray(sink_probs, np.float64)
    if not 0 <= i0 < p.shape[-1]:
        raise ValueError(f"i0 must be in [0, T) = [0, {p.shape[-1]}), got {i0}")
    return p[..., i0:].mean(axis=(1, 3))


def _distance_entropy(p: np.ndarray, i0: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean distance Σ_j P_ij (i - j) and entropy of rows i ≥ i0; p [L, B, H, T, T] -> two [L, H]."""
    length = p.shape[-1]
    dist = np.arange(length)[:, None] - np.arange(length)[None, :]
    d = (p * np.maximum(dist, 0)).sum(-1)[..., i0:]
    ent = -(p * np.log(np.where(p > 0, p, 1.0))).sum(-1)[..., i0:]
    return d.mean(axis=(1, 3)), ent.mean(axis=(1, 3))


def sink_locality(probs: np.ndarray, *, i0: int = 16, eps: float = 0.3, sink: int = 0) -> dict[str, Any]:
    """D5: per head mean attention distance and entropy, as is and with the sink column removed.

    probs [L, B, H, T, T]; the sink column `sink` is zeroed and rows renormalized (rows with no other key
    stay zero). Returns distance / entropy / distance_no_sink / entropy_no_sink [L, H], and the mean
    distance of heads with first-token mass > eps versus ≤ eps (nan when a group is empty).
    """
    p = np.asarray(probs, np.float64)
    dist, ent = _distance_entropy(p, i0)
    q = p.copy()
    q[..., sink] = 0.0
    total = q.sum(-1, keepdims=True)
    q = np.where(total > 0, q / np.where(total > 0, total, 1.0), 0.0)
    dist_ns, ent_ns = _distance_entropy(q, i0)
    high = key_mass(p, i0=i0).mean(axis=1)[..., sink] > eps
    return {
        "distance": dist,
        "entropy": ent,
        "distance_no_sink": dist_ns,
        "entropy_no_sink": ent_ns,
        "distance_high_sink": float(dist[high].mean()) if high.any() else float("nan"),
        "distance_low_sink": float(dist[~high].mean()) if (~high).any() else float("nan"),
    }


def co_occurrence(flagged_entries: list, probs: np.ndarray, *, i0: int = 16, eps: float = 0.3) -> dict[str, Any]:
    """D6: Jaccard overlap of the spike-token set (D1 flags) and the sink-token set, per layer and overall.

    flagged_entries: D1's (layer, row, pos, ...) tuples over L+1 streams; layer l's spikes are those of
    h^l, the stream its attention reads. Sink tokens of layer l: (row, key j) with a_{b,h}(j) > eps for
    some head. Returns jaccard [L] (nan where both sets are empty) and jaccard_overall.
    """
    mass = key_mass(probs, i0=i0)  # [L, B, H, T]
    n_layers = mass.shape[0]
    sinks = [set(zip(*np.nonzero((mass[lay] > eps).any(axis=1)), strict=True)) for lay in range(n_layers)]
    spikes = [{(e[1], e[2]) for e in flagged_entries if e[0] == lay} for lay in range(n_layers)]
    per_layer, inter, union = [], 0, 0
    for a, b in zip(spikes, sinks, strict=True):
        b = {(int(r), int(j)) for r, j in b}
        inter, union = inter + len(a & b), union + len(a | b)
        per_layer.append(len(a & b) / len(a | b) if a | b else float("nan"))
    return {"jaccard": np.array(per_layer), "jaccard_overall": inter / union if union else float("nan")}
