"""Second-moment statistics for rounding: the layer proxy E[x xᵀ] and YAQA's Kronecker-factored KL Hessian.

- `input_moments`: H_in = mean over real tokens of x xᵀ for every site, x the input the Linear receives
  (GPTQ / LDLQ's layer proxy). The model runs block by block in the unrolled layout with every site's Linear
  wrapped in a tap that sows its input, so nothing in the model changes.
- `kl_sketch_b`: YAQA's Sketch B of the Hessian of KL(p_orig ‖ p_Ŵ) at Ŵ = W, i.e. the Fisher of the model's
  own predictive distribution: targets are sampled from the model's softmax (not the data's labels), and for
  each sequence b the per-sequence weight gradient G_b [m, n] of the sampled-label cross-entropy gives
  H_in = mean_b G_bᵀ G_b [n, n] and H_out = mean_b G_b G_bᵀ [m, m] (Tseng, Sun, De Sa, ICML 2026,
  arXiv 2505.22988; one power iteration, as its recommended setting).
- `kl_sketch_a`: YAQA's Sketch A, the nearest Kronecker product H_out ⊗ H_in of the per-token
  E[(g gᵀ) ⊗ (x xᵀ)] by alternating power steps from H_in = E[x xᵀ] (`sketch_a_from_tokens`), with x the
  layer input and g the gradient of the sampled-label cross-entropy w.r.t. the layer output, per token
  (`token_statistics`: the tapped Linears also mark their outputs with `nnx.Module.perturb`).

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
from icml26zoo.validation import check_int

__all__ = ["input_moments", "kl_sketch_a", "kl_sketch_b", "sketch_a_from_tokens", "token_statistics"]


class _InputTap(nnx.Module):
    """A Linear that sows its input x [..., n] as `inputs` (and, with `outputs`, marks its output for
    gradient capture with `perturb`) around applying itself."""

    def __init__(self, linear: nnx.Linear, outputs: bool = False) -> None:
        self.linear = linear
        self.outputs = outputs

    def __call__(self, x: jax.Array) -> jax.Array:
        self.sow(nnx.Intermediate, "inputs", x)
        y = self.linear(x)
        return self.perturb("outputs", y) if self.outputs else y


def _positions(tokens: jax.Array, segments: jax.Array | None) -> jax.Array:
    if segments is None:
        return jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
    return positions_from_segments(segments)


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


def _tapped_blocks(model: nnx.Module, sites: list[LinearSite], outputs: bool = False) -> nnx.Module:
    """An unrolled copy of `model` whose site Linears are wrapped in `_InputTap`."""
    copy = convert_layer_layout(model, scan_layers=False) if model.cfg.scan_layers else nnx.clone(model)
    for site in sites:
        *parent_path, attribute = site.module_path
        parent = copy
        for part in parent_path:
            parent = parent[part] if isinstance(part, int) else getattr(parent, part)
        setattr(parent, attribute, _InputTap(getattr(parent, attribute), outputs))
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
        positions = _positions(tokens, segments)
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


def _unrolled_forward(net: nnx.Module, tokens: jax.Array, segments: jax.Array | None,
                      positions: jax.Array) -> jax.Array:
    """An unrolled (tapped) LM run block by block, so that sown and perturbed values reach `nnx.capture`."""
    x = net.embed(tokens).astype(jnp.dtype(net.cfg.compute_dtype))
    for block in net.layers:
        x, _ = block(x, segment_ids=segments, positions=positions)
    return net._logits(x)


def token_statistics(
    model: nnx.Module, batch: dict[str, Any], key: jax.Array
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{site name: (x [N, n], g [N, m])} per token with weight > 0 of one batch: each site's input and the
    gradient of Σ_t w_t CE(logits_t, y_t) w.r.t. its output, y_t ~ softmax(logits_t) drawn with `key` (as
    `kl_sketch_b` draws them for a batch's key)."""
    sites = linear_sites(model)
    return _token_statistics(model, _tapped_blocks(model, sites, outputs=True), sites, batch, key)


def _token_statistics(model: nnx.Module, tapped: nnx.Module, sites: list[LinearSite], batch: dict[str, Any],
                      key: jax.Array) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    tokens, segments, weights = _batch_parts(batch)
    grads, sown = _token_pass(model, tapped, tokens, segments, weights, key)
    keep = np.asarray(weights > 0).reshape(-1)
    inputs = {_site_name(path): variable.get_value()[0] for path, variable in nnx.to_flat_state(sown)}
    outputs = {_site_name(path): variable.get_value() for path, variable in nnx.to_flat_state(grads)}
    return {site.name: (_rows(inputs[site.name])[keep], _rows(outputs[site.name])[keep]) for site in sites}


@nnx.jit
def _token_pass(model: nnx.Module, tapped: nnx.Module, tokens: jax.Array, segments: jax.Array | None,
                weights: jax.Array, key: jax.Array) -> tuple[nnx.State, nnx.State]:
    """(gradients w.r.t. every tapped output, sown inputs) of the sampled-label loss, compiled once per shape."""
    positions = _positions(tokens, segments)
    labels = jax.random.categorical(key, jax.lax.stop_gradient(model(tokens, segment_ids=segments)))
    _, perturbations = nnx.capture(_unrolled_forward, nnx.Perturbation)(tapped, tokens, segments, positions)

    def loss(net: nnx.Module, perturbed: nnx.State) -> tuple[jax.Array, nnx.State]:
        run = nnx.capture(_unrolled_forward, nnx.Intermediate, init=perturbed)
        out, sown = run(net, tokens, segments, positions)
        return jnp.sum(weights * optax.softmax_cross_entropy_with_integer_labels(out, labels)), sown

    return nnx.grad(loss, argnums=1, has_aux=True)(tapped, perturbations)


def _site_name(path: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in path[:-1])


def _rows(value: jax.Array) -> np.ndarray:
    # float32, as computed: Sketch A keeps every calibration token's x and g on the host.
    array = np.asarray(value, np.float32)
    return array.reshape(-1, array.shape[-1])


def sketch_a_from_tokens(x: np.ndarray, g: np.ndarray, iterations: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """YAQA's Sketch A: H_in [n, n], H_out [m, m] with H_out ⊗ H_in ≈ E_t[(g_t g_tᵀ) ⊗ (x_t x_tᵀ)] from per-token
    x [N, n], g [N, m], by `iterations` (>= 1) alternating power steps from H_in = E[x xᵀ]:
    H_out ← E[g (xᵀ H_in x) gᵀ] / ‖H_in‖_F², H_in ← E[x (gᵀ H_out g) xᵀ] / ‖H_out‖_F²."""
    x, g = np.asarray(x, np.float64), np.asarray(g, np.float64)
    if x.ndim != 2 or g.ndim != 2 or len(x) != len(g) or len(x) == 0:
        raise ValueError(f"x [N, n] and g [N, m] must be matrices with the same N >= 1, got {x.shape} and {g.shape}")
    check_int("iterations", iterations)
    count = len(x)
    h_in = x.T @ x / count
    for _ in range(iterations):
        quad_in = np.einsum("ti,ij,tj->t", x, h_in, x)
        h_out = (g * quad_in[:, None]).T @ g / count / max(np.sum(h_in**2), 1e-300)
        quad_out = np.einsum("ti,ij,tj->t", g, h_out, g)
        h_in = (x * quad_out[:, None]).T @ x / count / max(np.sum(h_out**2), 1e-300)
    return h_in, h_out


def kl_sketch_a(model: nnx.Module, batches: Iterable[dict[str, Any]], key: jax.Array,
                iterations: int = 6) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{site name: (H_in [n, n], H_out [m, m])}: YAQA's Sketch A over every token of `batches` (6 power
    iterations, the paper's recommended count). The per-token x and g are kept on the host: small models."""
    sites = linear_sites(model)
    tapped = _tapped_blocks(model, sites, outputs=True)
    tokens: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for batch in batches:
        key, batch_key = jax.random.split(key)
        for name, pair in _token_statistics(model, tapped, sites, batch, batch_key).items():
            tokens.setdefault(name, []).append(pair)
    if not tokens:
        raise ValueError("batches must hold at least one batch, got none")
    return {name: sketch_a_from_tokens(np.concatenate([x for x, _ in pairs]), np.concatenate([g for _, g in pairs]),
                                       iterations)
            for name, pairs in tokens.items()}
