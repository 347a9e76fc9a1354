"""HARD-KV Logits Calibration (Yang et al., ICML 2026, arXiv 2606.28831): one temperature per (layer, KV head).

For each window query the oracle count n* is the size of the top-p nucleus of the *raw* attention; the head's
temperature T solves mean_i m_i(T) = p, where m_i(T) is the mass of the top-n*_i entries of softmax(φ_i / T)
and φ is the method's score (SnapKV: the logits max-pooled along the rows). m is non-increasing in T and φ's
ranking does not depend on T, so φ is sorted once and log T is bisected. Reconstruction (the zoo's choice):
the temperature is fitted once, offline, over the later queries of a few calibration sequences, and kept fixed
while decoding; the concentration of the raw attention decides how many rows a head keeps, φ decides which.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26zoo.longctx.hard_kv import masked_softmax, nucleus
from icml26zoo.models.block import convert_layer_layout

LOG_T_RANGE = (float(np.log(1e-3)), float(np.log(10.0)))
BISECTION_STEPS = 40


@dataclasses.dataclass(frozen=True)
class HeadScores:
    """Calibrated head scores: temperature [L, Hkv] (> 0) and the raw attention's mean nucleus fraction
    n*/N [L, Hkv] in (0, 1] (small = a peaked head that keeps few rows)."""

    temperature: np.ndarray
    oracle_fraction: np.ndarray

    def check(self, num_layers: int, num_kv_heads: int) -> None:
        """ValueError unless both arrays are finite [num_layers, num_kv_heads], temperature > 0."""
        shape = (num_layers, num_kv_heads)
        for name in ("temperature", "oracle_fraction"):
            value = np.asarray(getattr(self, name))
            if value.shape != shape or not np.all(np.isfinite(value)) or not np.all(value > 0):
                raise ValueError(
                    f"head scores {name} must be finite, > 0, of shape {shape} (layers, KV heads), got shape "
                    f"{value.shape} with values {value.ravel()[:8]}"
                )


def unrolled(model: nnx.Module) -> nnx.Module:
    """The model with its layers as a list (`convert_layer_layout`); the same model when already unrolled."""
    return convert_layer_layout(model, scan_layers=False) if model.cfg.scan_layers else model


def check_model(model: nnx.Module) -> None:
    """ValueError unless model is a DecoderLM-like LM with the plain RoPE/NoPE attention mixer and dense MLPs."""
    cfg = getattr(model, "cfg", None)
    if cfg is None or getattr(cfg, "mixer", None) != "attention" or cfg.moe is not None:
        raise ValueError(f"model must be an attention-mixer LM without MoE, got mixer "
                         f"{getattr(cfg, 'mixer', None)!r}")
    mixer = (model.layers.mixer if cfg.scan_layers else model.layers[0].mixer)
    if mixer.position not in ("rope", "none") or mixer.sink != "none" or mixer.gate_proj is not None:
        raise ValueError(f"model's attention must use position rope/none, no sink, no output gate, got position "
                         f"{mixer.position!r}, sink {mixer.sink!r}")


def group_max_logits(logits: jax.Array, num_kv_heads: int) -> jax.Array:
    """[B, H, T, S] -> [B, Hkv, T, S]: the max over each KV head's query group (as the released code does)."""
    batch, heads, length, keys = logits.shape
    return logits.reshape(batch, num_kv_heads, heads // num_kv_heads, length, keys).max(axis=2)


def layer_window_logits(model: nnx.Module, tokens: jax.Array) -> list[jax.Array]:
    """Each layer's GQA max-pooled causal logits [B, Hkv, T, T] (-inf above the diagonal) on tokens [B, T]."""
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
    x = model.embed(tokens).astype(jnp.dtype(model.cfg.compute_dtype))
    out = []
    for layer in model.layers:

        def mix(h: jax.Array, layer: nnx.Module = layer) -> tuple[jax.Array, None]:
            logits = layer.mixer.attention_logits(h, positions=positions)
            out.append(group_max_logits(logits, model.cfg.num_kv_heads))
            return layer.mixer(h, positions=positions)[0], None

        x, _ = layer.mixer_residual(x, mix)
        if layer.has_mlp:
            x, _ = layer.mlp_residual(x, lambda h, layer=layer: (layer.mlp(h), None))
    return out


def oracle_counts(z: jax.Array, visible: jax.Array, p: float) -> jax.Array:
    """n* [...]: the raw-attention nucleus size of each row of logits z [..., S]."""
    return nucleus(masked_softmax(z, visible), p).sum(axis=-1)


def top_mass(sorted_phi: jax.Array, visible: jax.Array, n_star: jax.Array, log_t: jax.Array) -> jax.Array:
    """Mean over rows of m_i(T): the mass of the first n*_i entries of softmax(sorted φ_i / T).

    sorted_phi [K, N, S] (descending per row), visible [K, N, S] (sorted alike), n_star [K, N], log_t [K] -> [K].
    """
    probs = masked_softmax(sorted_phi / jnp.exp(log_t)[:, None, None], visible)
    first = jnp.arange(sorted_phi.shape[-1]) < n_star[..., None]
    return jnp.sum(jnp.where(first, probs, 0.0), axis=-1).mean(axis=-1)


@jax.jit
def solve_temperature(phi: jax.Array, visible: jax.Array, n_star: jax.Array, p: jax.Array) -> jax.Array:
    """T [K] with mean_i m_i(T) = p per head k, by bisection on log T in [1e-3, 10].

    phi [K, N, S] scores (-inf where not visible), visible [K, N, S] bool, n_star [K, N] int.
    """
    order = jnp.argsort(-jnp.where(visible, phi, -jnp.inf), axis=-1, stable=True)
    sorted_phi = jnp.take_along_axis(phi, order, axis=-1)
    sorted_visible = jnp.take_along_axis(visible, order, axis=-1)
    heads = phi.shape[0]

    def step(_: int, bounds: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        lo, hi = bounds
        mid = (lo + hi) / 2
        too_peaked = top_mass(sorted_phi, sorted_visible, n_star, mid) > p
        return jnp.where(too_peaked, mid, lo), jnp.where(too_peaked, hi, mid)

    bounds = (jnp.full((heads,), LOG_T_RANGE[0]), jnp.full((heads,), LOG_T_RANGE[1]))
    lo, hi = jax.lax.fori_loop(0, BISECTION_STEPS, step, bounds)
    return jnp.exp((lo + hi) / 2)


def snapkv_scores(z: jax.Array, visible: jax.Array, pool_kernel: int) -> jax.Array:
    """φ: z [..., S] max-pooled along S (width pool_kernel, "same", -inf padding), -inf where not visible."""
    window = (1,) * (z.ndim - 1) + (pool_kernel,)
    pooled = jax.lax.reduce_window(z, -jnp.inf, jax.lax.max, window, (1,) * z.ndim, "SAME")
    return jnp.where(visible, pooled, -jnp.inf)


def head_rows(z: jax.Array, first_query: int) -> tuple[jax.Array, jax.Array]:
    """Causal logits z [B, Hkv, T, T] -> the rows of queries >= first_query per head, [Hkv, N, T], and their
    visibility."""
    length = z.shape[-1]
    visible = jnp.tril(jnp.ones((length, length), jnp.bool_))[first_query:]
    rows = jnp.moveaxis(z[:, :, first_query:], 1, 0)
    rows = rows.reshape(rows.shape[0], -1, length)
    return rows, jnp.broadcast_to(visible[None, None], (z.shape[0], 1, *visible.shape)).reshape(1, -1, length)


def calibrate_head_scores(
    model: nnx.Module, tokens: jax.Array, *, top_p: float = 0.9, pool_kernel: int = 7, first_query: int | None = None,
) -> HeadScores:
    """Calibrates HARD-KV's per-(layer, KV head) temperatures on tokens [B, T] (a few sequences of the LM's data).

    The window queries are those at positions >= first_query (default T // 2). Returns `HeadScores`.
    """
    check_model(model)
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
    if not hasattr(tokens, "ndim") or tokens.ndim != 2 or tokens.shape[1] < 2:
        raise ValueError(f"tokens must be an int array [B, T] with T >= 2, got shape {getattr(tokens, 'shape', None)}")
    model = unrolled(model)
    first = tokens.shape[1] // 2 if first_query is None else first_query
    temperature, fraction = _calibrate(model, jnp.asarray(tokens, jnp.int32), top_p, pool_kernel, first)
    return HeadScores(np.asarray(temperature), np.asarray(fraction))


@nnx.jit(static_argnums=(2, 3, 4))
def _calibrate(model: nnx.Module, tokens: jax.Array, top_p: float, pool_kernel: int, first: int):
    """(temperature [L, Hkv], oracle fraction [L, Hkv]) of `calibrate_head_scores`, in one compiled program."""
    temperatures, fractions = [], []
    for z in layer_window_logits(model, tokens):
        rows, visible = head_rows(z, first)
        visible = jnp.broadcast_to(visible, rows.shape)
        n_star = oracle_counts(rows, visible, top_p)
        phi = snapkv_scores(rows, visible, pool_kernel)
        temperatures.append(solve_temperature(phi, visible, n_star, jnp.float32(top_p)))
        fractions.append((n_star / visible.sum(axis=-1)).mean(axis=-1))
    return jnp.stack(temperatures), jnp.stack(fractions)
