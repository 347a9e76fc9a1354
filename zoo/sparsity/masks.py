"""Pruning-at-initialisation masks: Random, Magnitude, SNIP and GraSP, and their optax mask.

Paper: Pham, Ta, Tran-Thanh, "Pruning at Initialisation through the lens of Graphon Limit" (ICML 2026,
arXiv 2602.06675).

Every criterion gives each prunable weight θ_j a saliency and keeps the `round((1 - sparsity) · N)` most
salient of the N prunable weights, exactly.
Ties are broken deterministically: among equal saliencies the weight that comes first in the order of
`jax.tree_util.tree_flatten` (then row-major within the leaf) is kept.

Prunable leaves are the weight matrices, chosen by parameter name as `zoo.optim.builtin.decay_mask` chooses
what to decay (`kernel`, `embedding`); biases, norm scales and other parameters are never pruned. A mask is
a pytree with the structure of `params`: a bool array of the leaf's shape on prunable leaves (True = kept)
and the Python scalar `True` (nothing pruned) on every other leaf.

Scope. `"global"` ranks all prunable weights of the model together (layers can collapse at high sparsity;
read the per-layer densities in `zoo.sparsity.stats`). `"layerwise"` keeps the same
fraction of every layer: every prunable leaf, and for a leaf stacked for `jax.lax.scan` (zoo models with
`scan_layers`: shape [L, ...] under a `layers` key followed by a name rather than an index) every slice
`leaf[l]`, so a scanned and an unscanned model get the same per-layer budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from icml26zoo.losses import weighted_cross_entropy, weighted_mean
from icml26zoo.validation import check_choice, check_positive, check_unit_interval

PRUNABLE_NAMES = ("kernel", "embedding")  # the names zoo.optim.builtin.decay_mask treats as weight matrices
STACKED_KEYS = ("layers",)  # zoo models stack scanned layers along axis 0 under these keys
SCOPES = ("global", "layerwise")

LossFn = Callable[[Any, Any], jax.Array]  # (params, batch) -> scalar loss


def _key_name(key: Any) -> Any:
    return getattr(key, "key", getattr(key, "name", getattr(key, "idx", None)))


def leaf_name(path: Sequence[Any]) -> str:
    """The parameter's name: the last string key of its path (nnx's trailing "value" skipped)."""
    for key in reversed(path):
        name = _key_name(key)
        if isinstance(name, str) and name != "value":
            return name
    return ""


def is_stacked(path: Sequence[Any], stacked_keys: Sequence[str] = STACKED_KEYS) -> bool:
    """True for a leaf of scanned layers: a stacked key followed by a name (an index means a layer list)."""
    names = [_key_name(k) for k in path]
    return any(n in stacked_keys and i + 1 < len(names) and isinstance(names[i + 1], str)
               for i, n in enumerate(names))


def path_str(path: Sequence[Any]) -> str:
    return "/".join(str(_key_name(k)) for k in path)


def prunable_mask(params: Any, names: Sequence[str] = PRUNABLE_NAMES) -> Any:
    """Bool tree: True for the leaves a criterion may prune (weight matrices by name)."""
    return jax.tree_util.tree_map_with_path(lambda path, _: leaf_name(path) in names, params)


def _check(sparsity: Any, scope: str) -> None:
    check_unit_interval("sparsity", sparsity)
    check_choice("scope", scope, SCOPES)


def _keep_top(scores: np.ndarray, density: float) -> np.ndarray:
    """Bool mask (same shape) of the round(density · n) largest scores; ties keep the lower flat index."""
    flat = scores.ravel()
    k = int(round(density * flat.size))
    # A stable ascending sort of -s orders by descending s and keeps index order within ties; adding 0.0
    # turns -0.0 into +0.0 so that signed zeros tie too.
    order = np.argsort(-flat + 0.0, kind="stable")
    keep = np.zeros(flat.size, dtype=bool)
    keep[order[:k]] = True
    return keep.reshape(scores.shape)


def mask_from_scores(
    params: Any, scores: Any, *, sparsity: float, scope: str = "global", names: Sequence[str] = PRUNABLE_NAMES
) -> Any:
    """Keep the highest-scoring fraction (1 - sparsity) of the prunable weights.

    scores: a tree with params' structure (arrays of each leaf's shape; only prunable leaves are read).
    Returns the mask tree described in the module docstring.
    """
    _check(sparsity, scope)
    density = 1.0 - float(sparsity)
    path_leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
    score_leaves = treedef.flatten_up_to(scores)
    chosen = [i for i, (path, _) in enumerate(path_leaves) if leaf_name(path) in names]
    host = {}
    for i in chosen:
        path, leaf = path_leaves[i]
        s = np.asarray(score_leaves[i], dtype=np.float64)
        if s.shape != tuple(leaf.shape):
            raise ValueError(f"scores for {path_str(path)} have shape {s.shape}, expected {tuple(leaf.shape)}")
        if not np.all(np.isfinite(s)):
            raise ValueError(f"scores for {path_str(path)} are not all finite")
        host[i] = s
    keep = {}
    if scope == "global":
        flat = _keep_top(np.concatenate([host[i].ravel() for i in chosen]) if chosen else np.zeros(0), density)
        offsets = np.cumsum([0] + [host[i].size for i in chosen])
        for j, i in enumerate(chosen):
            keep[i] = flat[offsets[j]:offsets[j + 1]].reshape(host[i].shape)
    else:
        for i in chosen:
            s = host[i]
            stacked = is_stacked(path_leaves[i][0]) and s.ndim >= 1
            keep[i] = np.stack([_keep_top(s_l, density) for s_l in s]) if stacked else _keep_top(s, density)
    out = [jnp.asarray(keep[i]) if i in keep else True for i in range(len(path_leaves))]
    return jax.tree_util.tree_unflatten(treedef, out)


def random_mask(params: Any, *, sparsity: float, key: jax.Array, scope: str = "layerwise") -> Any:
    """Random pruning: s_j ~ U(0, 1) i.i.d., keep the top fraction (default: layer-wise uniform density).

    Leaf i draws from `fold_in(key, i)` (i = its tree-flatten index), so the mask is a function of key alone.
    """
    _check(sparsity, scope)
    path_leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
    scores = [jax.random.uniform(jax.random.fold_in(key, i), leaf.shape, jnp.float32)
              for i, (_, leaf) in enumerate(path_leaves)]
    return mask_from_scores(params, jax.tree_util.tree_unflatten(treedef, scores), sparsity=sparsity, scope=scope)


def magnitude_mask(params: Any, *, sparsity: float, scope: str = "global") -> Any:
    """Magnitude pruning: s_j = |θ_j|, keep the largest."""
    return mask_from_scores(params, jax.tree.map(jnp.abs, params), sparsity=sparsity, scope=scope)


def _float32(params: Any) -> Any:
    # Saliencies (the HVP above all) in float32, whatever the parameter dtype.
    return jax.tree.map(lambda p: p.astype(jnp.float32) if jnp.issubdtype(p.dtype, jnp.floating) else p, params)


def snip_scores(params: Any, loss_fn: LossFn, batch: Any) -> Any:
    """SNIP connection sensitivity s_j = |θ_j · ∂L/∂θ_j| on one batch (Lee et al. 2019), per leaf.

    This is |∂L/∂c_j| at c = 1 for the multiplicative mask θ ⊙ c. SNIP's normalisation by Σ s is omitted:
    it does not change the ranking.
    """
    params = _float32(params)
    grads = jax.jit(jax.grad(loss_fn))(params, batch)
    return jax.tree.map(lambda w, g: jnp.abs(w * g), params, grads)


def snip_mask(params: Any, *, sparsity: float, loss_fn: LossFn, batch: Any, scope: str = "global") -> Any:
    """SNIP mask: keep the weights with the largest |θ ⊙ ∇L(θ; batch)|. loss_fn(params, batch) -> scalar."""
    _check(sparsity, scope)
    return mask_from_scores(params, snip_scores(params, loss_fn, batch), sparsity=sparsity, scope=scope)


def grasp_hessian_gradient(params: Any, loss_fn: LossFn, batches: Sequence[Any]) -> tuple[Any, Any]:
    """(g, Hg) of GraSP (official code, pruner/GraSP.py), steps 3-4, over the batches ("halves").

    g = Σ_b ∇L_b(θ) and Hg = Σ_b ∇_θ⟨stop_gradient(g), ∇L_b(θ)⟩ = Σ_b H_b g, each H_b g a forward-over-reverse
    Hessian-vector product `jvp(grad(L_b), (θ,), (g,))`: one extra forward/backward, no dense Hessian.
    """
    params = _float32(params)
    grad_fn = jax.jit(jax.grad(loss_fn))
    hvp_fn = jax.jit(lambda p, b, v: jax.jvp(lambda q: jax.grad(loss_fn)(q, b), (p,), (v,))[1])
    g = None
    for b in batches:
        gb = grad_fn(params, b)
        g = gb if g is None else jax.tree.map(jnp.add, g, gb)
    hg = None
    for b in batches:
        hb = hvp_fn(params, b, g)
        hg = hb if hg is None else jax.tree.map(jnp.add, hg, hb)
    return g, hg


def grasp_scores(params: Any, loss_fn: LossFn, batches: Sequence[Any]) -> Any:
    """GraSP score S(θ) = −θ ⊙ Hg (GraSP step 5); the mask removes the LARGEST S (step 6)."""
    if not isinstance(batches, list | tuple) or not batches:
        raise ValueError(f"batches must be a non-empty list or tuple of batches, got {type(batches).__name__}")
    _, hg = grasp_hessian_gradient(params, loss_fn, batches)
    return jax.tree.map(lambda w, h: -w * h, _float32(params), hg)


def grasp_mask(
    params: Any, *, sparsity: float, loss_fn: LossFn, batches: Sequence[Any], scope: str = "global"
) -> Any:
    """GraSP mask: keep the round((1 - sparsity) · N) weights with the SMALLEST S = −θ ⊙ Hg.

    loss_fn should divide the logits by GraSP's temperature T = 200, which flattens the softmax so that the
    Hessian term is not dominated by saturated classes (use `lm_loss_fn(graphdef, temperature=200.0)` for
    zoo LMs). `batches` are the official code's halves of a class-balanced batch. GraSP's Xavier
    re-initialisation (step 1) is left to the caller: the scores are those of `params` as given.
    """
    _check(sparsity, scope)
    scores = grasp_scores(params, loss_fn, batches)
    # Keeping the smallest S is keeping the largest −S; mask_from_scores keeps the largest.
    return mask_from_scores(params, jax.tree.map(jnp.negative, scores), sparsity=sparsity, scope=scope)


def lm_loss_fn(graphdef: nnx.GraphDef, *, temperature: float = 1.0) -> LossFn:
    """loss(params, batch): weighted mean next-token cross-entropy of a zoo LM with logits / temperature.

    params is `nnx.to_pure_dict(nnx.split(model, nnx.Param)[1])`-shaped state for `graphdef`; batch has the
    train format: inputs/targets/segment_ids/positions [B, T] int32 and weights [B, T] float32.
    """
    check_positive("temperature", temperature)

    def loss(params, batch):
        model = nnx.merge(graphdef, params)
        logits = model(batch["inputs"], segment_ids=batch["segment_ids"], positions=batch["positions"])
        logits = logits.astype(jnp.float32) / temperature
        return weighted_mean(weighted_cross_entropy(logits, batch["targets"], batch["weights"]))

    return loss


def apply_mask(params: Any, mask: Any) -> Any:
    """θ ⊙ mask: pruned entries set to zero (exactly), unprunable leaves (mask True) returned as they are."""
    return jax.tree.map(lambda p, m: p if m is True else jnp.where(m, p, jnp.zeros_like(p)), params, mask)


class MaskedOptimizerState(NamedTuple):
    """The wrapped optimizer's state and the mask (held in the state so jit takes it as an argument, not a
    constant baked into the program; unprunable leaves hold a scalar True)."""

    inner_state: Any
    mask: Any


def masked_optimizer(optimizer: optax.GradientTransformation, mask: Any) -> optax.GradientTransformation:
    """Wrap `optimizer` so that pruned weights are zero after every step, and stay exactly zero.

    The gradient of the loss at a pruned (zero) weight is generally non-zero, so Adam's moments and decoupled
    weight decay would revive it unless the update is masked. Here:
      * gradients (and the params the inner optimizer sees) are masked first, so moments, clipping norms and
        weight decay only see live weights;
      * the update of a pruned entry is −θ (0 when params are not passed), so `optax.apply_updates` gives
        θ + (−θ) = 0 exactly even if params were never masked; with `apply_mask(params, mask)` once at the
        start the update is −0 and the weight stays 0.
    """
    mask_arrays = jax.tree.map(lambda m: jnp.asarray(m, dtype=bool), mask)

    def init_fn(params):
        return MaskedOptimizerState(optimizer.init(apply_mask(params, mask_arrays)), mask_arrays)

    def update_fn(updates, state, params=None):
        m = state.mask
        grads = jax.tree.map(lambda u, k: jnp.where(k, u, jnp.zeros_like(u)), updates, m)
        live_params = None if params is None else jax.tree.map(
            lambda p, k: jnp.where(k, p, jnp.zeros_like(p)), params, m)
        new, inner = optimizer.update(grads, state.inner_state, live_params)
        if params is None:
            new = jax.tree.map(lambda u, k: jnp.where(k, u, jnp.zeros_like(u)), new, m)
        else:
            new = jax.tree.map(lambda u, p, k: jnp.where(k, u, -p.astype(u.dtype)), new, params, m)
        return new, MaskedOptimizerState(inner, m)

    return optax.GradientTransformation(init_fn, update_fn)
