"""HARD-KV (Yang et al., ICML 2026): a fixed-shape cascade KV cache with per-head top-p budgets.

arXiv 2606.28831; code SuDIS-ZJU/HARDInfer. One attention layer's compressed cache is a dict of static arrays:

    k, v    [B, Hkv, R, Dh]  cache rows (post-RoPE keys), R = the row capacity of the budget
    valid   [B, Hkv, R] bool per-head validity (dense tail + condensed prefix)
    pos     [B, Hkv, R] int32 original token position of each row, -1 when empty
    n_rows  [B] int32        shared write pointer (R_used)
    qwin    [B, H, W, Dh]    the last W post-RoPE queries (a shift buffer), qpos [B, W] their positions (-1 empty)
    temperature [Hkv] f32    the layer's calibrated head temperatures (`hard_kv_calibrate`)

A new token goes to row n_rows in every head (the dense tier). When a write would overflow R, the layer is
compressed first (the condensed tier): SnapKV scores of the window queries, calibrated per head, a top-p
nucleus per window query, their union plus the sink and the recent rows, capped at B_hi = R - interval rows
(the cap drops the lowest priority first: floor, then nucleus), gathered to a prefix of each head in row order.
Attention is invariant to row order, so the rewrite changes nothing but which rows remain.

Reconstruction choices (the fixed-shape JAX design is the zoo's): compression runs lazily when the next write would
overflow, rather than on a fixed Δ clock (the same clock once the cache is full); temperatures are calibrated
offline per (layer, KV head) and fixed; the floor is the top `floor_rows` by window-mean calibrated
probability; the score is SnapKV only (no R-KV).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from icml26zoo.validation import check_int, check_interval

NEG_INF = -jnp.inf
CACHE_KEYS = ("k", "n_rows", "pos", "qpos", "qwin", "temperature", "v", "valid")


@dataclasses.dataclass(frozen=True)
class HardKVConfig:
    """HARD-KV hyperparameters. `budget`: the cache's rows as a fraction of max_len (the memory held),
    `top_p`: the nucleus mass p, `window`: W_q window queries, `recent`: W_r forced recent rows, `sink`: forced
    first rows, `interval`: rows appended between compressions (Δ), `pool_kernel`: SnapKV max-pool width,
    `floor_rows`: B_lo, rows kept at least (forced rows included)."""

    budget: float = 0.5
    top_p: float = 0.9
    window: int = 8
    recent: int = 4
    sink: int = 1
    interval: int = 8
    pool_kernel: int = 7
    floor_rows: int = 0

    def __post_init__(self) -> None:
        for name in ("budget", "top_p"):
            check_interval(name, getattr(self, name), 0, 1, closed="right")
        for name, minimum in (("window", 1), ("recent", 0), ("sink", 0), ("interval", 1), ("pool_kernel", 1),
                              ("floor_rows", 0)):
            check_int(name, getattr(self, name), minimum=minimum)
        if self.pool_kernel % 2 == 0:
            raise ValueError(f"pool_kernel must be odd (a centred max-pool), got {self.pool_kernel}")


def cache_rows(config: HardKVConfig, max_len: int) -> int:
    """R, the rows each head holds: ceil(budget * max_len); ValueError when they cannot hold the forced rows
    plus one interval of appends."""
    rows = min(max_len, math.ceil(config.budget * max_len))
    if rows < max_len and rows - config.interval < max(config.sink + config.recent, config.floor_rows, 1):
        raise ValueError(
            f"budget = {config.budget} gives {rows} rows of max_len = {max_len}: too few for interval "
            f"{config.interval} plus sink {config.sink} + recent {config.recent} (floor_rows {config.floor_rows})"
        )
    return rows


def init_layer_cache(
    batch: int, num_heads: int, num_kv_heads: int, head_dim: int, rows: int, window: int, temperature: jax.Array,
    dtype: jnp.dtype,
) -> dict[str, jax.Array]:
    """An empty compressed cache of one layer (shapes in the module docstring); temperature [Hkv]."""
    return {
        "k": jnp.zeros((batch, num_kv_heads, rows, head_dim), dtype),
        "v": jnp.zeros((batch, num_kv_heads, rows, head_dim), dtype),
        "valid": jnp.zeros((batch, num_kv_heads, rows), jnp.bool_),
        "pos": jnp.full((batch, num_kv_heads, rows), -1, jnp.int32),
        "n_rows": jnp.zeros((batch,), jnp.int32),
        "qwin": jnp.zeros((batch, num_heads, window, head_dim), jnp.float32),
        "qpos": jnp.full((batch, window), -1, jnp.int32),
        "temperature": jnp.asarray(temperature, jnp.float32),
    }


def check_layer_cache(cache: object, expected: dict[str, jax.ShapeDtypeStruct]) -> None:
    """ValueError unless `cache` has exactly the entries, shapes and dtypes of `expected`."""
    if not isinstance(cache, dict) or sorted(cache) != sorted(expected):
        got = sorted(cache) if isinstance(cache, dict) else type(cache).__name__
        raise ValueError(f"cache must be a HARD-KV layer cache with entries {sorted(expected)}, got {got}")
    for name, want in expected.items():
        got = cache[name]
        if tuple(jnp.shape(got)) != tuple(want.shape) or jnp.result_type(got) != want.dtype:
            raise ValueError(
                f"cache[{name!r}] must have shape {tuple(want.shape)} and dtype {want.dtype}, got "
                f"{tuple(jnp.shape(got))} {jnp.result_type(got)}"
            )


def group_logits(q: jax.Array, k: jax.Array) -> jax.Array:
    """q [B, H, W, Dh], k [B, Hkv, R, Dh] -> float32 logits [B, Hkv, g, W, R] (query head h reads kv head h // g)."""
    batch, heads, length, dim = q.shape
    group = heads // k.shape[1]
    q = q.astype(jnp.float32).reshape(batch, k.shape[1], group, length, dim)
    logits = jnp.einsum("bhgwd,bhrd->bhgwr", q, k.astype(jnp.float32), precision=jax.lax.Precision.HIGHEST)
    return logits * jnp.float32(dim**-0.5)


def attend(cache: dict[str, jax.Array], q: jax.Array, q_pos: jax.Array) -> jax.Array:
    """Attention of q [B, C, H, Dh] at positions q_pos [B, C] over the valid rows at positions <= q_pos
    -> [B, C, H, Dh] float32."""
    logits = group_logits(jnp.swapaxes(q, 1, 2), cache["k"])  # [B, Hkv, g, C, R]
    visible = cache["valid"][:, :, None, None, :] & (
        cache["pos"][:, :, None, None, :] <= q_pos[:, None, None, :, None]
    )
    weights = jax.nn.softmax(jnp.where(visible, logits, NEG_INF), axis=-1)
    out = jnp.einsum("bhgcr,bhrd->bchgd", weights, cache["v"].astype(jnp.float32),
                     precision=jax.lax.Precision.HIGHEST)
    return out.reshape(q.shape)


def append(cache: dict[str, jax.Array], q: jax.Array, k: jax.Array, v: jax.Array, pos: jax.Array) -> dict:
    """Writes k, v [B, C, Hkv, Dh] at rows n_rows .. n_rows + C - 1 of every head and pushes q [B, C, H, Dh]
    (positions pos [B, C]) into the query window. The caller keeps n_rows + C <= R (compress first)."""
    chunk = k.shape[1]

    def write_one(buffer: jax.Array, rows: jax.Array, start: jax.Array) -> jax.Array:
        return jax.lax.dynamic_update_slice_in_dim(buffer, rows.astype(buffer.dtype), start, axis=1)

    write = jax.vmap(write_one)
    heads = cache["k"].shape[1]
    pos_rows = jnp.broadcast_to(pos[:, None, :], (pos.shape[0], heads, chunk))
    qwin = jnp.concatenate([cache["qwin"], jnp.swapaxes(q, 1, 2).astype(jnp.float32)], axis=2)
    qpos = jnp.concatenate([cache["qpos"], pos.astype(jnp.int32)], axis=1)
    window = cache["qpos"].shape[1]
    return {
        **cache,
        "k": write(cache["k"], jnp.swapaxes(k, 1, 2), cache["n_rows"]),
        "v": write(cache["v"], jnp.swapaxes(v, 1, 2), cache["n_rows"]),
        "valid": write(cache["valid"], jnp.ones(pos_rows.shape, jnp.bool_), cache["n_rows"]),
        "pos": write(cache["pos"], pos_rows, cache["n_rows"]),
        "n_rows": cache["n_rows"] + jnp.int32(chunk),
        "qwin": qwin[:, :, -window:],
        "qpos": qpos[:, -window:],
    }


def window_scores(cache: dict[str, jax.Array], pool_kernel: int) -> tuple[jax.Array, jax.Array]:
    """The GQA max-pooled window logits z and the SnapKV score φ (max-pool over rows), both [B, Hkv, W, R]
    float32, -inf where a row is invalid or after the window query; and the visibility mask [B, Hkv, W, R]."""
    z = jnp.max(group_logits(cache["qwin"], cache["k"]), axis=2)
    qpos = cache["qpos"][:, None, :, None]
    visible = cache["valid"][:, :, None, :] & (cache["pos"][:, :, None, :] <= qpos) & (qpos >= 0)
    z = jnp.where(visible, z, NEG_INF)
    phi = jax.lax.reduce_window(z, NEG_INF, jax.lax.max, (1, 1, 1, pool_kernel), (1, 1, 1, 1), "SAME")
    return z, jnp.where(visible, phi, NEG_INF), visible


def masked_softmax(logits: jax.Array, visible: jax.Array) -> jax.Array:
    """Softmax over the last axis with exact zeros where not visible; an all-masked row gives zeros, not NaN."""
    safe = jnp.where(visible, logits, jnp.float32(-1e30))
    probs = jax.nn.softmax(safe, axis=-1)
    return jnp.where(visible.any(axis=-1, keepdims=True), jnp.where(visible, probs, 0.0), 0.0)


def nucleus(probs: jax.Array, p: float) -> jax.Array:
    """Bool [..., R]: the smallest set of largest entries of probs [..., R] with mass >= p (sorted exclusive
    cumsum < p); zero entries never join. p >= 1 keeps every non-zero entry."""
    order = jnp.argsort(-probs, axis=-1, stable=True)
    ranked = jnp.take_along_axis(probs, order, axis=-1)
    inside = (jnp.cumsum(ranked, axis=-1) - ranked < p) | (p >= 1)
    member = jnp.take_along_axis(inside, jnp.argsort(order, axis=-1), axis=-1)
    return member & (probs > 0)


def rank_of(scores: jax.Array) -> jax.Array:
    """int32 [..., R]: the rank of each entry when scores [..., R] are sorted descending (stable)."""
    return jnp.argsort(jnp.argsort(-scores, axis=-1, stable=True), axis=-1, stable=True).astype(jnp.int32)


def priorities(cache: dict[str, jax.Array], config: HardKVConfig) -> jax.Array:
    """int32 [B, Hkv, R]: 3 forced (sink, recent), 2 in the union of the window queries' calibrated nuclei,
    1 in the floor (top floor_rows by window-mean calibrated probability), 0 dropped or invalid."""
    _, phi, visible = window_scores(cache, config.pool_kernel)
    temperature = cache["temperature"][None, :, None, None]
    probs = masked_softmax(phi / temperature, visible)  # π_T [B, Hkv, W, R]
    in_nucleus = nucleus(probs, config.top_p).any(axis=2)
    valid = cache["valid"]
    position = cache["pos"].astype(jnp.float32)
    oldest_rank = rank_of(jnp.where(valid, -position, NEG_INF))
    newest_rank = rank_of(jnp.where(valid, position, NEG_INF))
    forced = (oldest_rank < config.sink) | (newest_rank < config.recent)
    floor = rank_of(jnp.where(valid, probs.mean(axis=2), -1.0)) < config.floor_rows
    pri = jnp.where(forced, 3, jnp.where(in_nucleus, 2, jnp.where(floor, 1, 0)))
    return jnp.where(valid, pri, 0).astype(jnp.int32)


def compress_layer(cache: dict[str, jax.Array], config: HardKVConfig) -> dict[str, jax.Array]:
    """The condensed-tier rewrite of one layer: each head keeps n_h = min(#{pri > 0}, B_hi) rows, the cap
    cutting the lowest priority (then the newest) first; the kept rows are gathered to a prefix [0, n_h) in
    their original row order (a stable partition), so rows stay sorted by position and SnapKV's pooling
    neighbourhood stays positional. n_rows <- max_h n_h. Shapes are unchanged."""
    rows = cache["k"].shape[2]
    cap = rows - config.interval
    pri = priorities(cache, config)
    kept_count = jnp.minimum((pri > 0).sum(axis=-1), cap)  # n_h [B, Hkv]
    by_priority = jnp.argsort(jnp.argsort(-pri, axis=-1, stable=True), axis=-1)
    kept = (by_priority < kept_count[..., None]) & (pri > 0)
    perm = jnp.argsort(~kept, axis=-1, stable=True)
    gather = lambda x: jnp.take_along_axis(x, perm[..., None] if x.ndim == 4 else perm, axis=2)  # noqa: E731
    valid = jnp.arange(rows, dtype=jnp.int32) < kept_count[..., None]
    return {
        **cache,
        "k": gather(cache["k"]),
        "v": gather(cache["v"]),
        "valid": valid,
        "pos": jnp.where(valid, gather(cache["pos"]), -1),
        "n_rows": kept_count.max(axis=-1).astype(jnp.int32),
    }


def compress_cache(cache: dict[str, jax.Array], config: HardKVConfig, chunk: int = 0) -> dict[str, jax.Array]:
    """Compresses the batch rows of one layer cache whose write pointer cannot take `chunk` more rows (all rows
    when chunk is 0 and the cache is fuller than B_hi); the others pass through. Runs the rewrite only when some
    row needs it (`lax.cond`)."""
    rows = cache["k"].shape[2]
    need = cache["n_rows"] + chunk > (rows if chunk else rows - config.interval)

    def rewrite(c: dict[str, jax.Array]) -> dict[str, jax.Array]:
        new = compress_layer(c, config)
        pick = lambda a, b: jnp.where(need.reshape(need.shape + (1,) * (a.ndim - 1)), a, b)  # noqa: E731
        return {key: new[key] if key == "temperature" else pick(new[key], c[key]) for key in c}

    return jax.lax.cond(need.any(), rewrite, lambda c: c, cache)
