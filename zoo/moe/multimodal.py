"""ConfSMoE's multimodal classifier with two-stage missing-modality imputation (ICML 2026).

Per-modality linear encoders map raw inputs [B, S, F_m] to S tokens of width d; each fusion layer runs
pre-LN self-attention over all M·S tokens of a sample, then the MoE feed-forward (`MoEFeedForward`, any
registered router; ConfSMoE's is "confidence") with a post-LN residual h ← LN(h + y). The readout takes
the mean token of each modality, concatenates them and applies Linear → GELU → LN → Linear to C classes.

Missing modalities (present [B, M] False):
  stage 1 (input level, before the model): the raw input is replaced by the mean of `pool_size` random
          training inputs of that modality, drawn anew at every training step (`fill_from_batch`, from the
          training batch's rows that have the modality) and once for evaluation
          (`zoo.moe.multimodal_data.fill_missing` from a `TrainingPool` of the whole training split, never
          the test split; the `zoo_multimodal` dataset stores its validation split filled so);
  stage 2 (expert level, first layer only, `expert_imputation`): the missing modality's tokens (which the
          MoE skips) query the other modalities' per-slot expert outputs O [S, k, d]; attention weights
          are softmaxed over the other modalities' tokens per expert slot, only the top k' = ⌊(M−1)·S/4⌋
          are kept (not renormalized), and h_m ← LN(h_m + Σ weight · O).
Samples with a missing modality leave after layer 0; complete samples run every layer. Both choices are
made per sample with `jnp.where`, so one jitted program serves every mask.

The shared trainer runs the classifier as the registered model "confsmoe" (`icml26zoo.models.confsmoe`:
sizes from a ModelConfig, inputs read from a point-set batch by `unpack_points`) with the objective
"multimodal_moe" (`icml26zoo.losses.moe`) on the dataset "zoo_multimodal".

Deviations from the reference code: a normal pre-LN attention residual (the reference adds the attention
output to itself); tokens of a missing modality are masked out of the stage-2 softmax (the reference zeroes
their values, which still draws softmax mass), so a missing modality receives no weight when another is
present; the stage-2 residual reuses the layer's MoE LayerNorm; experts have no biases (`MoEFeedForward`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.moe.capacity import capacity_keep, expert_capacity
from icml26zoo.moe.layer import MoEConfig, MoEFeedForward
from icml26zoo.validation import check_int

Inputs = tuple[jax.Array, ...]


@dataclasses.dataclass(frozen=True)
class ConfSMoEConfig:
    """The classifier: modalities (raw feature widths), tokens S, width d, layers, and its MoE."""

    feature_dims: tuple[int, ...] = (6, 10)
    tokens: int = 8
    dim: int = 64
    num_classes: int = 4
    num_layers: int = 1
    num_heads: int = 4
    moe: MoEConfig = MoEConfig(num_experts=4, top_k=2, router="confidence", load_balance_weight=0.0,
                               z_loss_weight=0.0)

    def __post_init__(self) -> None:
        if len(self.feature_dims) < 2:
            raise ValueError(f"feature_dims must name at least 2 modalities, got {self.feature_dims!r}")
        for name in ("tokens", "dim", "num_layers", "num_heads"):
            check_int(name, getattr(self, name))
        check_int("num_classes", self.num_classes, minimum=2)
        if self.dim % self.num_heads:
            raise ValueError(f"dim must be a multiple of num_heads = {self.num_heads}, got {self.dim}")

    @property
    def num_modalities(self) -> int:
        return len(self.feature_dims)

    @property
    def kept_weights(self) -> int:
        """k' = ⌊(M − 1)·S / 4⌋ (at least 1): stage-2 weights kept per (query token, expert slot)."""
        return max(1, (self.num_modalities - 1) * self.tokens // 4)


def check_batch(config: ConfSMoEConfig, inputs: Inputs, present: jax.Array) -> int:
    """Raises ValueError naming `inputs` or `present` unless inputs[m] is [B, S, F_m] and present is [B, M]."""
    modalities = config.num_modalities
    if len(inputs) != modalities:
        raise ValueError(f"inputs must hold {modalities} modality arrays, got {len(inputs)}")
    batch = inputs[0].shape[0] if inputs[0].ndim else -1
    for m, (x, features) in enumerate(zip(inputs, config.feature_dims, strict=True)):
        if x.shape != (batch, config.tokens, features):
            raise ValueError(f"inputs[{m}] must have shape [B, S, F] = ({batch}, {config.tokens}, {features}), "
                             f"got {x.shape}")
    if present.shape != (batch, modalities):
        raise ValueError(f"present (the missing-modality mask) must have shape [B, M] = ({batch}, {modalities}), "
                         f"got {present.shape}")
    return batch


def unpack_points(points: jax.Array, features: jax.Array, weights: jax.Array, feature_dims: tuple[int, ...],
                  tokens: int) -> tuple[Inputs, jax.Array, jax.Array]:
    """The classifier's inputs from a feature batch (`zoo.moe.multimodal_data.pack_points` wrote it).

    points [B, N, F_max] (N >= M·S; point m·S + s is modality m's token s, its first F_m coordinates),
    features [B, N, 1] (> 0 on the tokens of a missing modality whose stage-1 fill is still to be drawn) or
    [B, N, 0], weights [B, N] (> 0 where the modality is present)
    -> (inputs[m] [B, S, F_m], present [B, M] bool, to_fill [B, M] bool).
    """
    modalities = len(feature_dims)
    width = max(feature_dims)
    batch, count = points.shape[0], modalities * tokens
    if points.ndim != 3 or points.shape[1] < count or points.shape[2] != width:
        raise ValueError(f"points must have shape [B, N, F_max] with N >= M·S = {count} and F_max = {width}, "
                         f"got {points.shape}")
    if weights.shape != points.shape[:2]:
        raise ValueError(f"weights must have shape [B, N] = {points.shape[:2]}, got {weights.shape}")
    if features.shape[:2] != points.shape[:2] or features.ndim != 3 or features.shape[2] > 1:
        raise ValueError(f"features must have shape [B, N, 1] or [B, N, 0] with [B, N] = {points.shape[:2]} (the "
                         f"stage-1 flags), got {features.shape}")
    grid = points[:, :count].reshape(batch, modalities, tokens, width)
    inputs = tuple(grid[:, m, :, :dim] for m, dim in enumerate(feature_dims))
    present = weights[:, :count].reshape(batch, modalities, tokens)[:, :, 0] > 0
    if features.shape[2] == 0:
        return inputs, present, jnp.zeros_like(present)
    to_fill = features[:, :count, 0].reshape(batch, modalities, tokens)[:, :, 0] > 0
    return inputs, present, to_fill & ~present


def fill_from_batch(inputs: Inputs, present: jax.Array, to_fill: jax.Array, key: jax.Array, pool_size: int
                    ) -> Inputs:
    """Stage 1 during training: each inputs[m][b] with to_fill[b, m] becomes the mean of `pool_size` inputs[m][b']
    drawn at random (with replacement, independently per sample) among the batch's rows b' that have modality m
    (a training batch: training inputs only). Other entries, and every entry of a modality no row of the batch
    has, are returned unchanged."""
    filled = []
    for m, x in enumerate(inputs):
        pool = present[:, m]
        logits = jnp.where(pool, 0.0, -jnp.inf)
        picks = jax.random.categorical(jax.random.fold_in(key, m), logits, shape=(pool_size, x.shape[0])).T
        average = jnp.mean(x[picks], axis=1).astype(x.dtype)  # [B, S, F_m]
        use = to_fill[:, m] & jnp.any(pool)
        filled.append(jnp.where(use[:, None, None], average, x))
    return tuple(filled)


def zero_missing(inputs: Inputs, present: jax.Array) -> Inputs:
    """Undo stage 1: inputs[m] [B, S, F_m] with every missing modality (present [B, M] False) set to zero, the raw
    inputs of the task before any fill. Evaluates a model trained without stage 1 on a split stored filled."""
    return tuple(x * present[:, m, None, None].astype(x.dtype) for m, x in enumerate(inputs))


def moe_with_slot_outputs(
    moe: MoEFeedForward, x: jax.Array, mask: jax.Array, rng: jax.Array | None
) -> tuple[jax.Array, jax.Array, dict[str, jax.Array]]:
    """`moe(x, mask=mask, rng=rng)` that also returns each slot's expert output.

    x [N, D], mask [N] bool -> (y [N, D], slot_outputs [N, k, D] (zero where an assignment is not kept),
    aux as the layer's). Written beside the layer (it composes the layer's router, experts and diagnostics)
    because stage 2 needs the per-slot outputs the layer sums away.
    """
    cfg = moe.config
    routing = moe.router(x, mask, rng)
    capacity = expert_capacity(x.shape[0], cfg.top_k, cfg.num_experts, cfg.capacity_factor)
    keep = capacity_keep(routing.indices, mask, cfg.num_experts, capacity)
    group_ids = jnp.where(keep, routing.indices, cfg.num_experts).reshape(-1)
    rows = jnp.repeat(x, cfg.top_k, axis=0)
    slot_outputs = moe.experts(rows, group_ids).reshape(-1, cfg.top_k, x.shape[-1])
    weights, extras = moe.router.combine(routing, slot_outputs)
    weights = weights * keep.astype(weights.dtype)
    y = jnp.sum(slot_outputs.astype(jnp.float32) * weights[..., None], axis=1).astype(x.dtype)
    aux = moe._aux(routing, keep, mask)
    aux.update(extras)
    return y, slot_outputs, aux


def expert_imputation(
    queries: jax.Array, keys: jax.Array, values: jax.Array, present: jax.Array, kept: int
) -> tuple[jax.Array, jax.Array]:
    """Stage 2 for every modality m from the others' expert outputs.

    queries [B, M, S, d] (W_q · the placeholder tokens), keys [B, M, S, k, d] (W_k · expert outputs),
    values [B, M, S, k, d] (raw expert outputs), present [B, M] bool, kept = k'.
    Returns (imputed [B, M, S, d], weights [B, M, S, (M−1)·S, k]): for modality m the softmax over the other
    modalities' (M−1)·S tokens per slot of q·K/√d, tokens of missing modalities masked out while another
    modality is present, all but the top `kept` per (query, slot) zeroed.
    """
    batch, modalities, tokens, slots, width = values.shape
    present_values = present[:, :, None, None, None].astype(values.dtype)
    keys, values = keys * present_values, values * present_values
    imputed, weights = [], []
    for m in range(modalities):
        others = [i for i in range(modalities) if i != m]
        other_keys = keys[:, others].reshape(batch, -1, slots, width)  # [B, T, k, d], T = (M−1)·S
        other_values = values[:, others].reshape(batch, -1, slots, width)
        logits = jnp.einsum("bsd,btkd->bskt", queries[:, m], other_keys, precision="highest") / math.sqrt(width)
        token_present = jnp.repeat(present[:, others], tokens, axis=1)  # [B, T]
        any_present = jnp.any(token_present, axis=1)
        allowed = token_present | ~any_present[:, None]
        logits = jnp.where(allowed[:, None, None, :], logits, -jnp.inf)
        probs = jax.nn.softmax(logits, axis=-1)  # [B, S, k, T]
        _, top = jax.lax.top_k(jax.lax.stop_gradient(probs), kept)
        keep = jnp.sum(jax.nn.one_hot(top, probs.shape[-1], dtype=probs.dtype), axis=-2)
        probs = probs * keep
        imputed.append(jnp.einsum("bskt,btkd->bsd", probs, other_values, precision="highest"))
        weights.append(jnp.moveaxis(probs, 2, 3))  # [B, S, T, k]
    return jnp.stack(imputed, axis=1), jnp.stack(weights, axis=1)


class FusionLayer(nnx.Module):
    """Pre-LN self-attention over a sample's M·S tokens, then the MoE with h ← LN(h + y) (and stage 2)."""

    def __init__(self, config: ConfSMoEConfig, *, imputes: bool, rngs: nnx.Rngs) -> None:
        d = config.dim
        self.attention_norm = nnx.LayerNorm(d, rngs=rngs)
        self.attention = nnx.MultiHeadAttention(num_heads=config.num_heads, in_features=d, decode=False,
                                                rngs=rngs)
        self.moe = MoEFeedForward(d, d, config.moe, activation="gelu", num_classes=config.num_classes, rngs=rngs)
        self.moe_norm = nnx.LayerNorm(d, rngs=rngs)
        self.query = nnx.Linear(d, d, use_bias=False, rngs=rngs) if imputes else None
        self.key = nnx.Linear(d, d, use_bias=False, rngs=rngs) if imputes else None
        self.kept = config.kept_weights

    def __call__(self, h: jax.Array, token_mask: jax.Array, present: jax.Array, *, impute: bool,
                 rng: jax.Array | None) -> tuple[jax.Array, dict[str, jax.Array]]:
        """h [B, M, S, d], token_mask [B, M, S] bool (tokens the MoE routes), present [B, M] -> h', aux."""
        batch, modalities, tokens, width = h.shape
        x = h.reshape(batch, modalities * tokens, width)
        x = x + self.attention(self.attention_norm(x))
        y, slots, aux = moe_with_slot_outputs(self.moe, x.reshape(-1, width), token_mask.reshape(-1), rng)
        x = x.reshape(h.shape)
        fused = self.moe_norm(x + y.reshape(h.shape))
        if impute and self.query is not None:
            slots = slots.reshape(*h.shape[:3], -1, width)
            imputed, weights = expert_imputation(self.query(x), self.key(slots), slots, present, self.kept)
            fused = jnp.where(present[:, :, None, None], fused, self.moe_norm(x + imputed))
            aux["imputation_weights"] = weights
        return fused, aux


class ConfSMoEClassifier(nnx.Module):
    """inputs[m] [B, S, F_m] (stage-1 filled), present [B, M] bool -> (logits [B, C], aux per layer).

    aux is a list (one dict per layer) of the MoE's aux with "token_weight" [B·M·S] (the tokens whose
    confidence counts: routed tokens of the samples that reach the layer) and, in layer 0 with
    imputation, "imputation_weights" [B, M, S, (M−1)·S, k].
    """

    def __init__(self, config: ConfSMoEConfig, *, rngs: nnx.Rngs) -> None:
        self.config = config
        d, modalities = config.dim, config.num_modalities
        self.encoders = nnx.List([nnx.Linear(f, d, rngs=rngs) for f in config.feature_dims])
        self.positions = nnx.Param(0.02 * jax.random.normal(rngs.params(), (modalities, config.tokens, d)))
        self.layers = nnx.List([FusionLayer(config, imputes=i == 0, rngs=rngs) for i in range(config.num_layers)])
        self.readout_hidden = nnx.Linear(modalities * d, d, rngs=rngs)
        self.readout_norm = nnx.LayerNorm(d, rngs=rngs)
        self.readout_out = nnx.Linear(d, config.num_classes, rngs=rngs)

    def encode(self, inputs: Inputs) -> jax.Array:
        """inputs[m] [B, S, F_m] -> tokens [B, M, S, d]."""
        tokens = jnp.stack([enc(x.astype(jnp.float32)) for enc, x in zip(self.encoders, inputs, strict=True)], 1)
        return tokens + self.positions[...]

    def __call__(self, inputs: Inputs, present: jax.Array, *, impute: bool = True,
                 rng: jax.Array | None = None) -> tuple[jax.Array, list[dict[str, Any]]]:
        """impute=False is the plain "fuse" path (no stage 2); rng turns on the router's training noise."""
        check_batch(self.config, inputs, present)
        present = present.astype(jnp.bool_)
        complete = jnp.all(present, axis=1)
        h = self.encode(inputs)
        rngs = [None] * len(self.layers) if rng is None else list(jax.random.split(rng, len(self.layers)))
        auxes, first = [], None
        for index, (layer, layer_rng) in enumerate(zip(self.layers, rngs, strict=True)):
            reaches = present if index == 0 else present & complete[:, None]
            token_mask = jnp.broadcast_to(reaches[:, :, None], h.shape[:3])
            h, aux = layer(h, token_mask, present, impute=impute, rng=layer_rng)
            aux["token_weight"] = token_mask.reshape(-1).astype(jnp.float32)
            auxes.append(aux)
            first = h if index == 0 else first
        h = jnp.where(complete[:, None, None, None], h, first)
        pooled = jnp.mean(h, axis=2).reshape(h.shape[0], -1)  # [B, M·d]
        hidden = self.readout_norm(jax.nn.gelu(self.readout_hidden(pooled), approximate=False))
        return self.readout_out(hidden), auxes
