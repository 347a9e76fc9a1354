"""Second-moment statistics for rounding: the layer proxy E[x xᵀ] and YAQA's Kronecker-factored KL Hessian.

- `input_moments`: H_in = mean over real tokens of x xᵀ for every site, x the input the Linear receives
  (GPTQ / LDLQ's layer proxy). The model runs block by block in the unrolled layout with every site's Linear
  wrapped in a tap that sows its input, so nothing in the model changes.
- `kl_sketch_b`: YAQA's Sketch B of the Hessian of KL(p_orig ‖ p_Ŵ) at Ŵ = W, i.e. the Fisher of the model's
  own predictive distribution: targets are sampled from the model's softmax (not the data's labels), and for
  each sequence b the per-sequence weight gradient G_b [m, n] of the sampled-label cross-entropy gives
  H_in = mean_b G_bᵀ G_b [n, n] and H_out = mean_b G_b G_bᵀ [m, m] (Tseng, Sun, De Sa, ICML 2026,
  arXiv 2505.22988; one power iteration, as its recommended setting). Sketch A is not implemented.

All statistics are accumulated in float64 on the host; a batch is a dict with "inputs" [B, T] int and
optionally "segment_ids" [B, T] and "weights" [B, T] (the trainer's batch format).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from icml26zoo.models.block import convert_layer_layout
from icml26zoo.models.lm import positions_from_segments
from icml26zoo.quant.sites import LinearSite, linear_sites

__all__ = ["input_moments", "kl_sketch_b"]


class _InputTap(nnx.Module):
    """A Linear that sows its input x [..., n] as `inputs` before applying itself."""

    def __init__(self, linear: nnx.Linear) -> None:
        self.linear = linear

    def __call__(self, x: jax.Array) -> jax.Array:
        self.sow(nnx.Intermediate, "inputs", x)
        return self.linear(x)


def _batch_parts(batch: dict[str, Any]) -> tuple[jax.Array, jax.Array | None, jax.Array]:
    if not isinstance(batch, dict) or "inputs" not in batch:
        raise ValueError(f"batch must be a dict with 'inputs' [B, T], got {type(batch).__name__}")
    tokens = jnp.asarray(batch["inputs"], jnp.int32)
    if tokens.ndim != 2:
        raise ValueError(f"batch['inputs'] must have shape [B, T], got {tokens.shape}")
    segments = batch.get("segment_ids")
    segments = None if segments is None else jnp.asarray(segments, jnp.int32)
    weights = batch.get("weights")
    weights = jnp.ones(tokens.shape, jnp.float32) if weights is None else jnp.asarray(weights, jnp.float32)
    return tokens, segments, weights


def _tapped_blocks(model: nnx.Module, sites: list[LinearSite]) -> nnx.Module:
    """An unrolled copy of `model` whose site Linears are wrapped in `_InputTap`."""
    copy = convert_layer_layout(model, scan_layers=False) if model.cfg.scan_layers else nnx.clone(model)
    for site in sites:
        *parent_path, attribute = site.module_path
        parent = copy
        for part in parent_path:
            parent = parent[part] if isinstance(part, int) else getattr(parent, part)
        setattr(parent, attribute, _InputTap(getattr(parent, attribute)))
    return copy


def input_moments(model: nnx.Module, batches: Iterable[dict[str, Any]]) -> dict[str, np.ndarray]:
    """{site name: H_in [n, n]} = mean of x xᵀ over the tokens with weight > 0 of `batches`."""
    sites = linear_sites(model)
    tapped = _tapped_blocks(model, sites)
    sums: dict[str, np.ndarray] = {}
    count = 0.0

    @nnx.jit
    def layer_inputs(block: nnx.Module, x: jax.Array, segments: jax.Array | None, positions: jax.Array):
        run = nnx.capture(lambda b, h: b(h, segment_ids=segments, positions=positions), nnx.Intermediate)
        (out, _), sown = run(block, x)
        return out, sown

    for batch in batches:
        tokens, segments, weights = _batch_parts(batch)
        positions = (jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
                     if segments is None else positions_from_segments(segments))
        mask = np.asarray(weights > 0, np.float64).reshape(-1)
        count += float(mask.sum())
        x = tapped.embed(tokens).astype(jnp.dtype(model.cfg.compute_dtype))
        for index, block in enumerate(tapped.layers):
            x, sown = layer_inputs(block, x, segments, positions)
            for path, variable in nnx.to_flat_state(sown):
                name = ".".join(str(p) for p in ("layers", index, *path[:-1]))
                inputs = np.asarray(variable.get_value()[0], np.float64)
                flat = inputs.reshape(-1, inputs.shape[-1]) * mask[:, None]
                sums[name] = sums.get(name, 0.0) + flat.T @ flat
    if count == 0:
        raise ValueError("batches must hold at least one token with weight > 0, got none")
    return {site.name: sums[site.name] / count for site in sites}


def kl_sketch_b(
    model: nnx.Module, batches: Iterable[dict[str, Any]], key: jax.Array
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{site name: (H_in [n, n], H_out [m, m])}: YAQA's Sketch B over the sequences of `batches`.

    For each sequence, targets y_t ~ softmax(logits_t) of the model itself (key split per batch), and the
    gradient of Σ_t w_t CE(logits_t, y_t) w.r.t. each site's kernel K = Wᵀ [n, m] is that sequence's G_bᵀ.
    """
    sites = linear_sites(model)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def sequence_loss(p: nnx.State, tokens: jax.Array, segments: jax.Array | None, weights: jax.Array,
                      labels: jax.Array) -> jax.Array:
        net = nnx.merge(graphdef, p, rest)
        logits = net(tokens[None], segment_ids=None if segments is None else segments[None])[0]
        return jnp.sum(weights * optax.softmax_cross_entropy_with_integer_labels(logits, labels))

    @jax.jit
    def outer_products(p: nnx.State, tokens, segments, weights, batch_key):
        net = nnx.merge(graphdef, p, rest)
        logits = net(tokens, segment_ids=segments)
        labels = jax.random.categorical(batch_key, jax.lax.stop_gradient(logits))
        seg_axis = None if segments is None else 0
        grads = jax.vmap(jax.grad(sequence_loss), in_axes=(None, 0, seg_axis, 0, 0))(p, tokens, segments, weights,
                                                                                   labels)
        pure = nnx.to_pure_dict(grads)
        result = {}
        for site in sites:
            node = pure
            for part in site.path:
                node = node[part]
            kernel = node if site.layer is None else node[:, site.layer]  # [B, n, m]
            result[site.name] = (jnp.einsum("bnm,bkm->nk", kernel, kernel), jnp.einsum("bnm,bnk->mk", kernel, kernel))
        return result

    sums: dict[str, list[np.ndarray]] = {}
    sequences = 0
    for batch in batches:
        tokens, segments, weights = _batch_parts(batch)
        key, batch_key = jax.random.split(key)
        for name, (h_in, h_out) in outer_products(params, tokens, segments, weights, batch_key).items():
            acc = sums.setdefault(name, [0.0, 0.0])
            acc[0] = acc[0] + np.asarray(h_in, np.float64)
            acc[1] = acc[1] + np.asarray(h_out, np.float64)
        sequences += tokens.shape[0]
    if sequences == 0:
        raise ValueError("batches must hold at least one sequence, got none")
    return {site.name: (sums[site.name][0] / sequences, sums[site.name][1] / sequences) for site in sites}
