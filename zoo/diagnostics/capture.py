"""A capturing forward pass for the decoder LM: per-layer residual streams, increments and attention maps.

The model's own code is not touched. The model is converted to the unrolled layout and its blocks are run
one by one here (embedding -> each block's two `Residual`s -> final norm -> head), calling the model's own
submodules with the same arguments, so the captured logits equal the model's unrolled forward bitwise.
Sublayers are wrapped, not replaced: the wrapper records what the sublayer sees and returns.

Hooks (used by `zoo.diagnostics.interventions`) may edit the residual stream before/after a block or
replace a head's attention logits; with no hooks the captured run is exactly the model's forward.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from zoo.models.block import convert_layer_layout
from zoo.models.lm import _check_tokens, positions_from_segments

# h [B, T, D] at layer l -> h' [B, T, D]
ResidualHook = Callable[[int, jax.Array], jax.Array]
# (layer l, float32 logits [B, H, T, T] with -inf on masked entries) -> edited logits
LogitsHook = Callable[[int, jax.Array], jax.Array]


@dataclasses.dataclass
class Hooks:
    """Optional edits applied during a captured forward.

    block_input: edits h^l before block l runs (what block l and the capture of h^l see).
    block_output: edits block l's output before it becomes h^{l+1}.
    attention_logits: edits the attention logits of layer l (attention mixer only). When set, that layer's
      attention runs on the materialized path of this module (softmax(logits) @ V, then the model's o_proj)
      instead of the mixer's fused kernel.
    """

    block_input: ResidualHook | None = None
    block_output: ResidualHook | None = None
    attention_logits: LogitsHook | None = None


def unrolled(model: nnx.Module) -> nnx.Module:
    """The model itself if its layers are unrolled, else a copy converted to the unrolled layout."""
    if getattr(model.cfg, "scan_layers", False):
        return convert_layer_layout(model, scan_layers=False)
    return model


def is_softmax_attention(mixer: nnx.Module) -> bool:
    """True for the plain "attention" mixer, the only one whose probabilities are recomputed here."""
    from zoo.mixers.attention import Attention

    return type(mixer) is Attention


def attention_logits(mixer: nnx.Module, x: jax.Array, positions: jax.Array, segment_ids: jax.Array | None):
    """Masked float32 attention logits [B, H, T, T] and values [B, T, H, Dh] of an `Attention` mixer.

    x [B, T, D] is the mixer's input. Uses the mixer's own projections (with QK-norm and RoPE); kv heads are
    repeated for GQA (query head h reads kv head h // (H // Hkv)). Masked entries (future keys, other
    segments) are -inf, so each row's softmax is the probability the fused kernel computes.
    """
    q, k, v = mixer._project_qkv(x, positions)
    group = mixer.num_heads // mixer.num_kv_heads
    k = jnp.repeat(k, group, axis=2)
    v = jnp.repeat(v, group, axis=2)
    scale = 1.0 / np.sqrt(mixer.head_dim)
    logits = jnp.einsum("bihd,bjhd->bhij", q.astype(jnp.float32), k.astype(jnp.float32)) * jnp.float32(scale)
    length = x.shape[1]
    allowed = jnp.tril(jnp.ones((length, length), dtype=jnp.bool_))[None, None]
    if segment_ids is not None:
        allowed = allowed & (segment_ids[:, :, None] == segment_ids[:, None, :])[:, None]
    return jnp.where(allowed, logits, -jnp.inf), v


def attend_materialized(mixer: nnx.Module, logits: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
    """softmax(logits [B, H, T, T]) @ v [B, T, H, Dh] -> (mixer output [B, T, D], per-head output [B, T, H, Dh]).

    A row that is entirely -inf (every key removed) gets zero probability instead of NaN.
    """
    finite = jnp.isfinite(logits).any(axis=-1, keepdims=True)
    probs = jax.nn.softmax(jnp.where(finite, logits, 0.0), axis=-1) * finite.astype(jnp.float32)
    heads = jnp.einsum("bhij,bjhd->bihd", probs, v.astype(jnp.float32)).astype(mixer.dtype)
    batch, length = heads.shape[:2]
    return mixer.o_proj(heads.reshape(batch, length, -1)), heads


def capture_forward(
    model: nnx.Module,
    tokens: jax.Array,
    *,
    segment_ids: jax.Array | None = None,
    materialize_attention: bool = True,
    hooks: Hooks | None = None,
) -> dict[str, Any]:
    """Runs a registered decoder LM on tokens [B, T] and records every layer.

    Returns a dict (jax arrays; L = num_layers):
      logits [B, T, V] float32 — equal (bitwise) to the unrolled model's forward when hooks is None;
      hidden [L+1, B, T, D] — residual stream h^l before block l (hidden[L] = last block's output,
        before the final norm);
      mixer_in / mlp_in [L, B, T, D] — what each sublayer receives (RMSNorm(h) for pre/sandwich);
      mixer_out / mlp_out [L, B, T, D] — each sublayer's raw output;
      attn_delta / mlp_delta [L, B, T, D] — the change of the residual stream across each sublayer
        (h_mid - h^l and h^{l+1} - h_mid; equal to the raw outputs for "pre"/"none"), so
        hidden[l+1] - hidden[l] = attn_delta[l] + mlp_delta[l] up to rounding;
      probs [L, B, H, T, T] float32 or None — attention probabilities, only for the "attention" mixer and
        when materialize_attention (memory grows as T²);
      head_out [L, B, T, H, Dh] or None — per-head attention output before o_proj (same conditions);
      tokens [B, T]; mixer (name); has_attention (bool).
    A scanned model is first converted to the unrolled layout (a copy; the model is not changed).
    """
    _check_tokens(tokens)
    model = unrolled(model)
    cfg = model.cfg
    hooks = hooks or Hooks()
    positions = (
        jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
        if segment_ids is None
        else positions_from_segments(segment_ids)
    )
    # The same casts as DecoderLM.forward_embeddings, so the stream enters block 0 identically.
    x = model.embed(tokens).astype(jnp.dtype(cfg.compute_dtype))
    rec: dict[str, list] = {k: [] for k in ("hidden", "mixer_in", "mixer_out", "mlp_in", "mlp_out", "probs", "heads")}
    rec_delta: dict[str, list] = {"attn_delta": [], "mlp_delta": []}
    has_attention = all(is_softmax_attention(layer.mixer) for layer in model.layers)
    for index, layer in enumerate(model.layers):
        if hooks.block_input is not None:
            x = hooks.block_input(index, x)
        rec["hidden"].append(x)
        mixer = layer.mixer

        def mix(h: jax.Array, mixer=mixer, index=index) -> tuple[jax.Array, Any]:
            rec["mixer_in"].append(h)
            if has_attention and (materialize_attention or hooks.attention_logits is not None):
                logits, v = attention_logits(mixer, h, positions, segment_ids)
                if hooks.attention_logits is not None:
                    logits = hooks.attention_logits(index, logits)
                    y, heads = attend_materialized(mixer, logits, v)
                else:
                    # Run the mixer itself, so the output (and the logits) stay the model's exactly.
                    y, _ = mixer(h, segment_ids=segment_ids, positions=positions)
                    _, heads = attend_materialized(mixer, logits, v)
                finite = jnp.isfinite(logits).any(axis=-1, keepdims=True)
                rec["probs"].append(
                    jax.nn.softmax(jnp.where(finite, logits, 0.0), axis=-1) * finite.astype(jnp.float32)
                )
                rec["heads"].append(heads)
            else:
                y, _ = mixer(h, segment_ids=segment_ids, positions=positions)
            rec["mixer_out"].append(y)
            return y, None

        def mlp(h: jax.Array, layer=layer) -> tuple[jax.Array, None]:
            rec["mlp_in"].append(h)
            y = layer.mlp(h)
            rec["mlp_out"].append(y)
            return y, None

        mid, _ = layer.mixer_residual(x, mix)
        out, _ = layer.mlp_residual(mid, mlp)
        rec_delta["attn_delta"].append(mid - x)
        rec_delta["mlp_delta"].append(out - mid)
        if hooks.block_output is not None:
            out = hooks.block_output(index, out)
        x = out
    rec["hidden"].append(x)
    logits = model._logits(x)
    result: dict[str, Any] = {k: jnp.stack(v) for k, v in rec.items() if k not in ("probs", "heads")}
    result.update({k: jnp.stack(v) for k, v in rec_delta.items()})
    result["probs"] = jnp.stack(rec["probs"]) if rec["probs"] else None
    result["head_out"] = jnp.stack(rec["heads"]) if rec["heads"] else None
    result.update(logits=logits, tokens=tokens, mixer=cfg.mixer, has_attention=has_attention)
    return result


def next_token_loss(logits: jax.Array, tokens: jax.Array) -> float:
    """Mean next-token cross-entropy: logits [B, T, V] at t predict tokens [B, T] at t+1 (T-1 targets)."""
    logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1)
    picked = jnp.take_along_axis(logp, tokens[:, 1:, None].astype(jnp.int32), axis=-1)
    return float(-jnp.mean(picked))
