"""Scaffolding shared by the per-mixer tests (test_fox, test_fix, test_mamba, ...): the small config, the
packed segments, input draws, the jitted call and float64 views of parameters."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26zoo.models import ModelConfig

F32 = {"atol": 1e-5, "rtol": 1e-5}  # the float32 row of the tolerance table (test_conformance.py)
B, T = 2, 10
# Two packed rows [B, T]: segments of 4 + 6 and 7 + 3 tokens.
SEGMENTS = np.array([[1] * 4 + [2] * 6, [5] * 7 + [6] * 3], np.int32)


def small_config(**overrides: Any) -> ModelConfig:
    """The tests' tiny model (D = 32, H = 4, Hkv = 2, one layer, 64 tokens, T_max = 32), `overrides` replaced."""
    fields = {"vocab_size": 64, "d_model": 32, "num_layers": 1, "num_heads": 4, "num_kv_heads": 2, "max_seq_len": 32}
    return ModelConfig(**{**fields, **overrides})


def build_mixer(cls: type, cfg: ModelConfig, *options: tuple[str, Any], seed: int = 0, **overrides: Any) -> Any:
    """`cls` built from `cfg` with `mixer_options=options` and other fields replaced by `overrides`."""
    return cls(dataclasses.replace(cfg, mixer_options=tuple(options), **overrides), rngs=nnx.Rngs(seed))


def arange_positions(batch: int, length: int) -> jax.Array:
    """[batch, length] int32: 0 .. length−1 in every row."""
    return jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (batch, length))


def random_inputs(
    d_model: int, seed: int = 0, length: int = T, dtype: Any = jnp.float32, *, draw_dtype: Any = None,
    scale: float = 1.0,
) -> tuple[jax.Array, jax.Array]:
    """(x [B, length, d_model] standard normal · scale in `dtype`, positions [B, length]).

    x is drawn in `draw_dtype` (default: `dtype`) and then cast, so a float32 draw cast to bfloat16 and a
    bfloat16 draw stay two distinct inputs, as each test module has always used.
    """
    x = jax.random.normal(jax.random.key(seed), (B, length, d_model), draw_dtype or dtype)
    if scale != 1.0:
        x = scale * x
    return x.astype(dtype), arange_positions(B, length)


@nnx.jit
def apply_mixer(mixer: Any, x: jax.Array, segment_ids: Any, positions: jax.Array, cache: Any = None) -> Any:
    """The jitted mixer call: (y [B, T, D], cache or None)."""
    return mixer(x, segment_ids=segment_ids, positions=positions, cache=cache)


def mixer_output(mixer: Any, x: jax.Array, segment_ids: Any, positions: jax.Array) -> jax.Array:
    """y [B, T, D] of the jitted call without a cache."""
    return apply_mixer(mixer, x, segment_ids, positions)[0]


def f64(value: Any) -> np.ndarray:
    """A parameter or array as a float64 NumPy array."""
    return np.asarray(value[...], np.float64)


def decode_in_chunks(
    mixer: Any, x: jax.Array, positions: jax.Array, cache: Any, sizes: tuple[int, ...]
) -> tuple[jax.Array, Any]:
    """Feeds x [B, T, D] to the jitted call in consecutive chunks of `sizes` tokens, carrying `cache`:
    (y [B, Σsizes, D] concatenated, the final cache)."""
    pieces, start = [], 0
    for size in sizes:
        y, cache = apply_mixer(mixer, x[:, start : start + size], None, positions[:, start : start + size], cache)
        pieces.append(y)
        start += size
    return jnp.concatenate(pieces, axis=1), cache


def segment_causal_mask(segment_ids: np.ndarray) -> np.ndarray:
    """One row's segment ids [T] -> bool [T, T]: i reads j iff j ≤ i in the same segment."""
    length = segment_ids.shape[0]
    return np.tril(np.ones((length, length), bool)) & (segment_ids[:, None] == segment_ids[None, :])


def decayed_softmax_reference(q: np.ndarray, k: np.ndarray, cum: np.ndarray, segment_ids: np.ndarray) -> np.ndarray:
    """float64 attention probabilities [B, H, T, T] of q [B, T, H, Dh] on k [B, T, Hkv, Dh] (query head h reads
    KV head h // (H // Hkv)), logits q·k/√Dh + Λ_i − Λ_j with cum = Λ [B, T, H], causal within segments [B, T]."""
    batch, length, heads, head_dim = q.shape
    probs = np.zeros((batch, heads, length, length))
    for b in range(batch):
        mask = segment_causal_mask(segment_ids[b])
        for head in range(heads):
            kv = head // (heads // k.shape[2])
            s = q[b, :, head] @ k[b, :, kv].T / np.sqrt(head_dim) + cum[b, :, head, None] - cum[b, None, :, head]
            s = np.where(mask, s, -np.inf)
            p = np.exp(s - s.max(-1, keepdims=True))
            probs[b, head] = p / p.sum(-1, keepdims=True)
    return probs


def norm_and_project_reference(r: np.ndarray, norm: Any, out_proj: Any) -> np.ndarray:
    """float64 RMSNorm(r) · scale (the module's eps) then out_proj: r [B, T, C] -> [B, T, D]."""
    normed = r / np.sqrt(np.mean(r**2, axis=-1, keepdims=True) + norm.eps) * f64(norm.scale)
    return normed @ f64(out_proj.kernel)


def assert_reference_matches_default(make_mixer: Any, x: jax.Array, positions: jax.Array) -> None:
    """`make_mixer(("implementation", "reference"))` gives `make_mixer()`'s y on x over SEGMENTS (float32 tolerance)."""
    segments = jnp.asarray(SEGMENTS)
    default = apply_mixer(make_mixer(), x, segments, positions)[0]
    reference = apply_mixer(make_mixer(("implementation", "reference")), x, segments, positions)[0]
    np.testing.assert_allclose(reference, default, **F32)
