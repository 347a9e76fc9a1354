"""API: Adaptive Prototype Imputation for multimodal sentiment analysis with missing modalities (ICML 2026).

A MulT-style backbone (`api_backbone`) whose missing modalities are filled, after the temporal Conv1d projection,
with class-temporal prototypes (SCOPE, `api_scope`) personalised by directional FiLM (DIAM, `api_diam`). Follows
the official code (github KX-yolo/API, model "APRIL", `trains/singleTask/model/april.py`, commit
ef641b3ceaaa3f9430a74bfc6e62f7e072f2939a); the maths is in docs/papers/api.md.

Imputation (`fill`): "zero" leaves missing modalities at zero (the baseline); "prototype" fills with the raw
prototype P_t[c] of a ready class; "diam" fills with γ(ĉ) ⊙ P_t[c] + β(ĉ) once all 3 × 7 prototypes are ready and
with the raw prototype before. The class c is the true class c(y) in training and, at test, the class estimated
from the available modalities only (labels are ignored). Deviation: missingness is a per-sample mask
`available [B, 3]` instead of the reference's whole-batch zeroing detected from all-zero tensors (the batch case
is the mask with equal rows).

Prototypes are `Prototype` variables, not parameters: the epoch-end update (`api_scope.update_prototypes`,
applied with `set_prototypes`) is a pure function of the epoch's cache, outside gradient descent. With
`cache_size` = S > 0 the model keeps that cache itself (`remember`): a ring buffer of the last S training samples'
projected sequences and classes, and a count; the batch that completes S samples replaces the prototypes by
SCOPE's update of the buffer. With S the number of training samples and a batch size dividing S, the buffer at that
moment holds exactly one epoch (the shared trainer visits every sample once per epoch), which is the reference's
epoch-end update; otherwise it is a sliding window of S samples updated every S samples (a documented deviation).
The shared trainer carries these non-Param variables between steps (`train.step`, "Model variables").
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.multimodal import api_scope as scope
from icml26zoo.multimodal.api_backbone import ResidualHead, StackedEncoders
from icml26zoo.multimodal.api_diam import DIAM, DIRECTIONS
from icml26zoo.validation import (
    check_bool,
    check_choice,
    check_float_array,
    check_int,
    check_interval,
    check_non_negative,
    check_positive,
    check_shape,
)

__all__ = ["APIConfig", "APIModel", "APIOutput", "FILLS", "MODALITIES", "Prototype", "api_loss", "set_prototypes"]

MODALITIES = ("text", "audio", "vision")
FILLS = ("zero", "prototype", "diam")
# (target, source) of the six cross-modal transformers, grouped by target: l<-a, l<-v, a<-l, a<-v, v<-l, v<-a.
_CROSS = ((0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1))


class Prototype(nnx.Variable):
    """A non-trainable SCOPE buffer (prototypes and their ready flags): no optimiser ever sees it."""


@dataclasses.dataclass(frozen=True)
class APIConfig:
    """Sizes and options of the API model (defaults: the small synthetic-MSA setting of the spec).

    input_dims: feature widths of (text, audio, vision); seq_len: input length T (aligned data); dim: d;
    kernel_size: the Conv1d kernel of every modality, T' = T - k + 1 (one kernel for all three, as the
    reference's MOSI setting 5/5/5, so that the encoders stack); cross_layers / memory_layers: depths of the cross-modal
    and the self-attention memory transformers; fill: "zero" | "prototype" | "diam"; temperature: τ of the
    prototype contrastive loss; discard_rate: fraction of a class's farthest samples dropped from its prototype;
    proto_weight / recon_weight: loss weights; modality_weights: contrastive-loss weights of (t, a, v);
    cache_size: S, the samples of the model's own epoch cache (`APIModel.remember`; 0: none, the caller updates
    the prototypes, as `set_prototypes`; ignored by the zero fill, which keeps no prototypes).
    """

    input_dims: tuple[int, int, int] = (32, 8, 12)
    seq_len: int = 20
    dim: int = 16
    num_heads: int = 2
    kernel_size: int = 5
    cross_layers: int = 2
    memory_layers: int = 3
    fill: str = "diam"
    temperature: float = 0.07
    discard_rate: float = 0.05
    proto_weight: float = 0.1
    recon_weight: float = 0.1
    modality_weights: tuple[float, float, float] = (1.0, 1.0, 1.0)
    diam_hidden_mult: float = 2.0
    diam_dropout: float = 0.3
    output_dropout: float = 0.0
    cache_size: int = 0

    def __post_init__(self) -> None:
        for name in ("input_dims", "modality_weights"):
            value = getattr(self, name)
            if not isinstance(value, tuple) or len(value) != 3:
                raise ValueError(f"{name} must be a tuple of 3 (text, audio, vision), got {value!r}")
        for i, width in enumerate(self.input_dims):
            check_int(f"input_dims[{i}]", width)
        check_int("kernel_size", self.kernel_size, maximum=self.seq_len)
        for i, weight in enumerate(self.modality_weights):
            check_non_negative(f"modality_weights[{i}]", weight, finite=True)
        for name in ("seq_len", "dim", "num_heads", "cross_layers", "memory_layers"):
            check_int(name, getattr(self, name))
        if self.dim % self.num_heads:
            raise ValueError(f"dim must be divisible by num_heads={self.num_heads}, got {self.dim}")
        check_choice("fill", self.fill, FILLS)
        check_positive("temperature", self.temperature, finite=True)
        check_interval("discard_rate", self.discard_rate, 0.0, 1.0, closed="left")
        for name in ("proto_weight", "recon_weight", "diam_hidden_mult"):
            check_non_negative(name, getattr(self, name), finite=True)
        check_interval("diam_dropout", self.diam_dropout, 0.0, 1.0, closed="left")
        check_interval("output_dropout", self.output_dropout, 0.0, 1.0, closed="left")
        check_int("cache_size", self.cache_size, minimum=0)

    @property
    def projected_length(self) -> int:
        """T' = T - k + 1."""
        return self.seq_len - self.kernel_size + 1


class APIOutput(NamedTuple):
    """prediction [B] (sentiment); projected: per modality [B, T', d], before any zeroing (the epoch cache);
    filled: the sequences the transformers read; classes [B] int32 used for imputation (-1: none);
    proto_loss, recon_loss: scalars (0 at eval or where the fill does not use them)."""

    prediction: jax.Array
    projected: tuple[jax.Array, ...]
    filled: tuple[jax.Array, ...]
    classes: jax.Array
    proto_loss: jax.Array
    recon_loss: jax.Array


class APIModel(nnx.Module):
    """The API model. Call with the three input sequences, the availability mask and (in training) the labels."""

    def __init__(self, config: APIConfig, *, rngs: nnx.Rngs) -> None:
        self.config = config
        d = config.dim
        self.proj = nnx.List([nnx.Conv(width, d, kernel_size=(config.kernel_size,), padding="VALID", use_bias=False,
                                       rngs=rngs) for width in config.input_dims])
        self.cross = StackedEncoders(len(_CROSS), d, config.num_heads, config.cross_layers, rngs=rngs)
        self.memory = StackedEncoders(len(MODALITIES), 2 * d, config.num_heads, config.memory_layers, rngs=rngs)
        self.gates = nnx.List([nnx.Linear(2 * d, 2 * d, rngs=rngs) for _ in MODALITIES])
        self.head = ResidualHead(6 * d, config.output_dropout, rngs=rngs)
        self.prototypes = Prototype(jnp.zeros((3, scope.NUM_CLASSES, config.projected_length, d), jnp.float32))
        self.ready = Prototype(jnp.zeros((3, scope.NUM_CLASSES), bool))
        self.diam = (DIAM(d, hidden_mult=config.diam_hidden_mult, dropout=config.diam_dropout, rngs=rngs)
                     if config.fill == "diam" else None)
        if config.cache_size and config.fill != "zero":
            self.cache = Prototype(jnp.zeros((3, config.cache_size, config.projected_length, d), jnp.float32))
            self.cache_classes = Prototype(jnp.zeros((config.cache_size,), jnp.int32))
            # Samples cached since the last prototype update (always < cache_size).
            self.cache_count = Prototype(jnp.zeros((), jnp.int32))
        else:
            self.cache = self.cache_classes = self.cache_count = None

    def remember(self, projected: tuple[jax.Array, ...], classes: jax.Array) -> None:
        """Caches one training batch (module docstring); per modality projected [B, T', d], classes [B] int32.

        Writes the B samples after the last cached one (wrapping around the S slots); when they complete S
        samples since the last update, the prototypes and ready flags become `api_scope.update_prototypes` of the
        whole buffer, used from the next call on. B must not exceed S.
        """
        if self.cache is None:
            raise ValueError(f"remember needs a model with an epoch cache (cache_size > 0 and a fill other than "
                             f"'zero'), got cache_size={self.config.cache_size}, fill={self.config.fill!r}")
        size = self.config.cache_size
        batch = classes.shape[0]
        if batch > size:
            raise ValueError(f"remember: the batch ({batch} samples) must not exceed cache_size={size}")
        count = self.cache_count.get_value()
        slots = (count + jnp.arange(batch)) % size
        features = jnp.stack([jax.lax.stop_gradient(x) for x in projected])
        cache = self.cache.get_value().at[:, slots].set(features)
        cache_classes = self.cache_classes.get_value().at[slots].set(classes.astype(jnp.int32))

        def update(banks: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
            fresh = [scope.update_prototypes(p, r, f, cache_classes, discard_rate=self.config.discard_rate)
                     for p, r, f in zip(*banks, cache, strict=True)]
            return jnp.stack([p for p, _ in fresh]), jnp.stack([r for _, r in fresh])

        banks = (self.prototypes.get_value(), self.ready.get_value())
        prototypes, ready = jax.lax.cond(count + batch >= size, update, lambda banks: banks, banks)
        self.prototypes.set_value(prototypes)
        self.ready.set_value(ready)
        self.cache.set_value(cache)
        self.cache_classes.set_value(cache_classes)
        self.cache_count.set_value((count + batch) % size)

    def bank(self) -> tuple[tuple[jax.Array, ...], tuple[jax.Array, ...]]:
        """(prototypes per modality [C, T', d], gradient stopped; ready flags per modality [C])."""
        protos, ready = jax.lax.stop_gradient(self.prototypes.get_value()), self.ready.get_value()
        return tuple(protos), tuple(ready)

    def project(self, text: jax.Array, audio: jax.Array, vision: jax.Array) -> tuple[jax.Array, ...]:
        """Temporal Conv1d projection (no bias, valid): [B, T, D_m] -> [B, T', d] per modality."""
        cfg = self.config
        for m, (name, x) in enumerate(zip(MODALITIES, (text, audio, vision), strict=True)):
            check_float_array(name, x, (None, cfg.seq_len, cfg.input_dims[m]), "[B, T, D]")
        if not text.shape[0] == audio.shape[0] == vision.shape[0]:
            raise ValueError(f"text, audio and vision must share the batch size, got {text.shape[0]}, "
                             f"{audio.shape[0]}, {vision.shape[0]}")
        return tuple(conv(x) for conv, x in zip(self.proj, (text, audio, vision), strict=True))

    def _personalised(self, sources: tuple[jax.Array, ...], classes: jax.Array, *, train: bool,
                      rngs: nnx.Rngs | None) -> jax.Array:
        """γ(ĉ) ⊙ P_t[c] + β(ĉ) of all six directions [6, B, T', d], ĉ from the temporal mean of `sources`
        (per modality [B, T', d]); classes [B] (clipped to a valid class: callers mask invalid ones)."""
        protos, _ = self.bank()
        safe = jnp.clip(classes, 0, None)
        means = jnp.stack([sources[s].mean(axis=1) for _, s, _ in DIRECTIONS])
        targets = jnp.stack([protos[t][safe] for _, _, t in DIRECTIONS])
        return self.diam.personalise(means, targets, train=train, rngs=rngs)

    def impute(self, zeroed: tuple[jax.Array, ...], available: jax.Array, classes: jax.Array, *, train: bool = False,
               rngs: nnx.Rngs | None = None) -> tuple[jax.Array, ...]:
        """Fills each sample's missing modalities (available [B, 3] False) per `config.fill`; the available ones
        are returned unchanged (bit-identical). zeroed: per modality [B, T', d]; classes [B] int (-1: none)."""
        if self.config.fill == "zero":
            return zeroed
        protos, ready = self.bank()
        all_ready = jnp.all(jnp.stack(ready))
        safe = jnp.clip(classes, 0, None)
        if self.diam is not None:
            source = scope.select_source(zeroed, available, protos, ready, classes)
            personal = self._personalised(zeroed, classes, train=train, rngs=rngs)
        filled = []
        for m, x in enumerate(zeroed):
            raw_ok = (classes >= 0) & ready[m][safe]
            fill = jnp.where(raw_ok[:, None, None], protos[m][safe], 0.0)
            if self.diam is not None:
                diam_fill = jnp.zeros_like(fill)
                for i, (_, s, t) in enumerate(DIRECTIONS):
                    if t == m:
                        diam_fill = jnp.where((source == s)[:, None, None], personal[i], diam_fill)
                fill = jnp.where(all_ready, diam_fill, fill)  # source -1 (none usable): stays zero
            filled.append(jnp.where(available[:, m, None, None], x, fill))
        return tuple(filled)

    def fuse(self, sequences: tuple[jax.Array, ...], *, train: bool = False,
             rngs: nnx.Rngs | None = None) -> jax.Array:
        """Cross-modal transformers, memory, gated last step, residual head: per modality [B, T', d] -> [B]."""
        crossed = self.cross(jnp.stack([sequences[t] for t, _ in _CROSS]),
                             jnp.stack([sequences[s] for _, s in _CROSS]))  # [6, B, T', d]
        memory = self.memory(jnp.stack([jnp.concatenate([crossed[2 * m], crossed[2 * m + 1]], axis=-1)
                                        for m in range(3)]))  # [3, B, T', 2d]
        lasts = [jax.nn.sigmoid(gate(memory[m, :, -1])) for m, gate in enumerate(self.gates)]
        # The reference concatenates (l, v, a); any fixed order is equivalent up to the head's weights.
        return self.head(jnp.concatenate(lasts, axis=-1), train=train, rngs=rngs)

    def _recon_loss(self, projected: tuple[jax.Array, ...], classes: jax.Array, *, train: bool,
                    rngs: nnx.Rngs | None) -> jax.Array:
        """Six-way reconstruction: mean over directions and batch of MSE(γ ⊙ P_t[c] + β, real x_t (detached));
        0 until all prototypes are ready."""
        _, ready = self.bank()
        real = tuple(jax.lax.stop_gradient(x) for x in projected)
        personal = self._personalised(real, classes, train=train, rngs=rngs)
        targets = jnp.stack([real[t] for _, _, t in DIRECTIONS])
        return jnp.where(jnp.all(jnp.stack(ready)), jnp.mean((personal - targets) ** 2), 0.0)

    def __call__(self, text: jax.Array, audio: jax.Array, vision: jax.Array, available: jax.Array,
                 labels: jax.Array | None = None, *, train: bool = False, rngs: nnx.Rngs | None = None) -> APIOutput:
        """text [B, T, D_t], audio [B, T, D_a], vision [B, T, D_v]; available [B, 3] bool (text, audio, vision);
        labels [B] sentiment, required when `train` and ignored otherwise (no label leakage at test);
        rngs: dropout streams when `train`. Returns `APIOutput`."""
        check_bool("train", train)
        projected = self.project(text, audio, vision)
        batch = text.shape[0]
        check_shape("available", available, (batch, 3), "[B, 3]")
        if available.dtype != jnp.bool_:
            raise ValueError(f"available must be a bool array of shape [B, 3], got {available.dtype}")
        zeroed = tuple(jnp.where(available[:, m, None, None], x, 0.0) for m, x in enumerate(projected))
        protos, ready = self.bank()
        zero = jnp.float32(0.0)
        if train:
            if labels is None:
                raise ValueError("labels must be given in training (the true class drives the imputation)")
            check_shape("labels", labels, (batch,), "[B]")
            classes = scope.label_to_class(labels)
        else:
            classes = scope.estimate_class(zeroed, available, protos, ready)
        filled = self.impute(zeroed, available, classes, train=train, rngs=rngs)
        prediction = self.fuse(filled, train=train, rngs=rngs)
        use_protos = train and self.config.fill != "zero"
        proto_loss = scope.prototype_contrastive_loss(
            projected, classes, protos, ready, temperature=self.config.temperature,
            weights=self.config.modality_weights) if use_protos else zero
        recon_loss = (self._recon_loss(projected, classes, train=train, rngs=rngs)
                      if train and self.diam is not None else zero)
        return APIOutput(prediction, projected, filled, classes, proto_loss, recon_loss)


def api_loss(output: APIOutput, labels: jax.Array, config: APIConfig,
             weights: jax.Array | None = None) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Total loss L1(prediction, y) + proto_weight · L_proto + recon_weight · L_recon, and its parts.

    labels [B] sentiment; weights [B] (optional, default all 1): the L1 term is Σ w |ŷ − y| / max(Σ w, 1), so
    padding rows (w = 0) count for nothing.
    """
    error = jnp.abs(output.prediction - labels)
    if weights is None:
        task = jnp.mean(error)
    else:
        check_shape("weights", weights, labels.shape, "[B]")
        task = jnp.sum(weights * error) / jnp.maximum(jnp.sum(weights), 1.0)
    total = task + config.proto_weight * output.proto_loss + config.recon_weight * output.recon_loss
    return total, {"task": task, "proto": output.proto_loss, "recon": output.recon_loss}


def set_prototypes(model: APIModel, prototypes: tuple[jax.Array, ...], ready: tuple[jax.Array, ...]) -> None:
    """Writes the epoch-end SCOPE prototypes (per modality [C, T', d]) and ready flags ([C] each) into `model`."""
    length, dim = model.config.projected_length, model.config.dim
    for m, (proto, flags) in enumerate(zip(prototypes, ready, strict=True)):
        check_shape(f"prototypes[{m}]", proto, (scope.NUM_CLASSES, length, dim), "[C, T', d]")
        check_shape(f"ready[{m}]", flags, (scope.NUM_CLASSES,), "[C]")
    model.prototypes.set_value(jnp.stack([jnp.asarray(p, jnp.float32) for p in prototypes]))
    model.ready.set_value(jnp.stack([jnp.asarray(r, bool) for r in ready]))
