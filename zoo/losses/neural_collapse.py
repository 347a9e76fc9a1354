"""Prototype losses on the unit hypersphere: NormFace, NTCE, NONL and SupCon, plus fixed prototypes.

Paper: Koromilas, Giannakopoulos, Nicolaou, Panagakis, "Neural Collapse by Design: Learning Class Prototypes
on the Hypersphere" (ICML 2026, arXiv 2605.20302). Written from the
paper's formulas (the paper's code was read for the maths, not copied).

Shapes: features z [M, D] (one row per batch sample), prototypes w [K, D] (one row per class), labels y [M]
int in [0, K), temperature τ > 0. Every loss L2-normalises z and w first, so it is invariant to positive
rescaling of either; s_ic = ⟨ẑ_i, ŵ_c⟩ / τ are the cosine logits. Each `*_losses` function returns the
per-sample losses [M] and a validity mask [M] (1 where the sample has a defined loss); `reduce_losses`
applies the spec's reductions ("mean", "sum", "none") over valid samples.

    NormFace  ℓ_i = −log softmax_c(s_i·)[y_i]                              (K classes as negatives)
    NTCE      ℓ_i = −log exp(a_ii) / Σ_j exp(a_ij),  a_ij = ⟨ŵ_{y_i}, ẑ_j⟩/τ   (M batch samples as negatives)
    NONL      ℓ_i = −a_ii + log Σ_{j: y_j ≠ y_i} exp(a_ij)                 ("symmetric", the default)
              ℓ_i = −s_{i,y_i} + log Σ_{c ≠ y_i} exp(s_ic)                 ("instance")
              ℓ_i = −a_ii + log(Σ_{j: y_j ≠ y_i} exp(a_ij) + Σ_{c ≠ y_i} exp(s_ic))   ("bidirectional")
    SupCon    ℓ_a = −mean_{p ∈ P(a)} log( exp(ẑ_a·ẑ_p/τ) / Σ_{k ≠ a} exp(ẑ_a·ẑ_k/τ) )  (Khosla et al.)

A NONL sample with no other-class sample in the batch (symmetric) has no negatives, so its loss is
undefined (log 0); it is marked invalid rather than given ε. A SupCon anchor with no positive likewise.
`valid` [M] float (optional, 1 = real sample) drops padding rows from every sum and every denominator.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax

from icml26zoo.validation import check_int, check_positive

REDUCTIONS = ("mean", "sum", "none")
NONL_VARIANTS = ("symmetric", "instance", "bidirectional")


def l2_normalize(x: jax.Array, axis: int = -1, eps: float = 1e-12) -> jax.Array:
    """x / max(‖x‖₂, eps) along `axis` (float32)."""
    x = jnp.asarray(x, jnp.float32)
    return x / jnp.maximum(jnp.linalg.norm(x, axis=axis, keepdims=True), eps)


def simplex_etf(num_classes: int, dim: int) -> np.ndarray:
    """Fixed prototypes [K, D] float32: a simplex equiangular tight frame, unit rows with pairwise cosine −1/(K−1).

    The K rows of sqrt(K/(K−1))·(I − 11ᵀ/K) span a (K−1)-dimensional subspace; they are written in an
    orthonormal basis of it and padded with zeros to D dims, so K ≤ D + 1 is required.
    """
    check_int("num_classes", num_classes, minimum=2)
    check_int(f"dim (a simplex ETF of {num_classes} vectors needs {num_classes - 1} dimensions)", dim,
              minimum=num_classes - 1)
    centering = np.eye(num_classes) - np.full((num_classes, num_classes), 1.0 / num_classes)
    eigenvalues, eigenvectors = np.linalg.eigh(centering)
    # The centring projector has eigenvalue 1 on the K−1 directions orthogonal to the all-ones vector.
    basis = eigenvectors[:, eigenvalues > 0.5]
    etf = basis * np.sqrt(num_classes / (num_classes - 1))
    return np.pad(etf, ((0, 0), (0, dim - (num_classes - 1)))).astype(np.float32)


def check_inputs(features: jax.Array, prototypes: jax.Array, labels: jax.Array, temperature: float) -> None:
    """ValueError naming the argument unless z [M, D], w [K, D], y [M] int in [0, K) and τ > 0."""
    if features.ndim != 2:
        raise ValueError(f"features must have shape [M, D], got shape {features.shape}")
    if prototypes.ndim != 2 or prototypes.shape[1] != features.shape[1]:
        raise ValueError(f"prototypes must have shape [K, {features.shape[1]}] (features' D), "
                         f"got shape {prototypes.shape}")
    check_labels(labels, features.shape[0], prototypes.shape[0])
    check_positive("temperature", temperature)


def check_labels(labels: jax.Array, num_samples: int, num_classes: int) -> None:
    """Shape [M] integer, and (when the values are concrete) every label in [0, K)."""
    if labels.shape != (num_samples,) or not jnp.issubdtype(labels.dtype, jnp.integer):
        raise ValueError(f"labels must be an integer array of shape [{num_samples}], "
                         f"got {labels.dtype} {labels.shape}")
    if not isinstance(labels, jax.core.Tracer):
        values = np.asarray(labels)
        if values.size and (values.min() < 0 or values.max() >= num_classes):
            raise ValueError(f"labels must lie in [0, {num_classes}) (the number of prototypes), "
                             f"got values in [{values.min()}, {values.max()}]")


def _valid(valid: jax.Array | None, num_samples: int) -> jax.Array:
    if valid is None:
        return jnp.ones((num_samples,), jnp.float32)
    if valid.shape != (num_samples,):
        raise ValueError(f"valid must have shape [{num_samples}], got shape {valid.shape}")
    return (jnp.asarray(valid) > 0).astype(jnp.float32)


def cosine_logits(features: jax.Array, prototypes: jax.Array, temperature: float) -> jax.Array:
    """s [M, K] = ⟨ẑ_i, ŵ_c⟩ / τ."""
    return l2_normalize(features) @ l2_normalize(prototypes).T / temperature


def anchored_logits(features: jax.Array, prototypes: jax.Array, labels: jax.Array, temperature: float) -> jax.Array:
    """a [M, M] = ⟨ŵ_{y_i}, ẑ_j⟩ / τ: row i is sample i's class prototype against every batch sample."""
    return l2_normalize(prototypes)[labels] @ l2_normalize(features).T / temperature


def _masked_logsumexp(logits: jax.Array, mask: jax.Array) -> jax.Array:
    """log Σ_{mask} exp(logits) per row [..., N] -> [...]; −inf for a row with nothing in its mask."""
    nonempty = jnp.any(mask, axis=-1)
    # An empty row gets finite stand-in logits: the −inf result is selected below, and the gradient of a
    # logsumexp over only −inf entries would be NaN even where it is multiplied by zero.
    masked = jnp.where(mask | ~nonempty[..., None], logits, -jnp.inf)
    return jnp.where(nonempty, jax.nn.logsumexp(masked, axis=-1), -jnp.inf)


def normface_losses(features: jax.Array, prototypes: jax.Array, labels: jax.Array, temperature: float,
                    valid: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """NormFace (cosine-logit cross-entropy over the K prototypes): (ℓ [M], valid [M])."""
    check_inputs(features, prototypes, labels, temperature)
    logits = cosine_logits(features, prototypes, temperature)
    return optax.losses.softmax_cross_entropy_with_integer_labels(logits, labels), _valid(valid, labels.shape[0])


def ntce_losses(features: jax.Array, prototypes: jax.Array, labels: jax.Array, temperature: float,
                valid: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """NTCE: cross-entropy of row i of a [M, M] with target j = i (same-class j ≠ i stay in the denominator)."""
    check_inputs(features, prototypes, labels, temperature)
    mask = _valid(valid, labels.shape[0])
    logits = anchored_logits(features, prototypes, labels, temperature)
    # Padding samples are not instances: they leave every denominator.
    log_denominator = _masked_logsumexp(logits, jnp.broadcast_to(mask[None, :] > 0, logits.shape))
    return jnp.where(mask > 0, log_denominator - jnp.diagonal(logits), 0.0), mask


def nonl_losses(features: jax.Array, prototypes: jax.Array, labels: jax.Array, temperature: float,
                valid: jax.Array | None = None, variant: str = "symmetric") -> tuple[jax.Array, jax.Array]:
    """NONL: the positive never enters its own denominator; (ℓ [M] (may be negative), valid [M]).

    variant "symmetric": negatives are the other-class batch samples against the prototype w_{y_i};
    "instance": the other prototypes against the sample z_i; "bidirectional": both denominators summed.
    """
    check_inputs(features, prototypes, labels, temperature)
    if variant not in NONL_VARIANTS:
        raise ValueError(f"variant must be one of {NONL_VARIANTS}, got {variant!r}")
    anchored = anchored_logits(features, prototypes, labels, temperature)
    cosine = cosine_logits(features, prototypes, temperature)
    return nonl_from_logits(anchored, cosine, labels, _valid(valid, labels.shape[0]), variant)


def nonl_from_logits(anchored: jax.Array, cosine: jax.Array, labels: jax.Array, valid: jax.Array,
                     variant: str = "symmetric") -> tuple[jax.Array, jax.Array]:
    """NONL from a [M, M] (prototype y_i vs sample j) and s [M, K] (sample i vs prototype c), both over τ."""
    if variant not in NONL_VARIANTS:
        raise ValueError(f"variant must be one of {NONL_VARIANTS}, got {variant!r}")
    positive = jnp.diagonal(anchored)
    other_samples = (labels[:, None] != labels[None, :]) & (valid[None, :] > 0)
    other_classes = jnp.arange(cosine.shape[1])[None, :] != labels[:, None]
    by_samples = _masked_logsumexp(anchored, other_samples)
    by_classes = _masked_logsumexp(cosine, other_classes)
    if variant == "symmetric":
        log_denominator = by_samples
    elif variant == "instance":
        log_denominator = by_classes
    else:
        log_denominator = jnp.logaddexp(by_samples, by_classes)
    defined = (valid > 0) & jnp.isfinite(log_denominator)
    losses = jnp.where(defined, log_denominator - positive, 0.0)
    return losses, defined.astype(jnp.float32)


def supcon_losses(views: jax.Array, labels: jax.Array, temperature: float = 0.07,
                  valid: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """SupCon over every view as anchor: views [M, V, D] -> (ℓ [V·M] view-major, valid [V·M]).

    Anchor a = (view v, sample i) is row v·M + i; its positives are the other rows with label y_i, its
    denominator every row but itself. An anchor without a positive is invalid.
    """
    if views.ndim != 3:
        raise ValueError(f"views must have shape [M, V, D] (samples, views, features), got shape {views.shape}")
    num_samples, num_views, _ = views.shape
    check_labels(labels, num_samples, np.iinfo(np.int32).max)
    check_positive("temperature", temperature)
    mask = jnp.tile(_valid(valid, num_samples), num_views)
    rows = l2_normalize(jnp.concatenate([views[:, v] for v in range(num_views)], axis=0))
    row_labels = jnp.tile(labels, num_views)
    logits = rows @ rows.T / temperature
    not_self = ~jnp.eye(rows.shape[0], dtype=bool) & (mask[None, :] > 0)
    log_prob = logits - _masked_logsumexp(logits, not_self)[:, None]
    positives = not_self & (row_labels[:, None] == row_labels[None, :])
    count = jnp.sum(positives, axis=1).astype(jnp.float32)
    mean_log_prob = jnp.sum(jnp.where(positives, log_prob, 0.0), axis=1) / jnp.maximum(count, 1.0)
    defined = (mask > 0) & (count > 0)
    return jnp.where(defined, -mean_log_prob, 0.0), defined.astype(jnp.float32)


def reduce_losses(losses: jax.Array, valid: jax.Array, reduction: str = "mean") -> jax.Array:
    """The spec's reductions over valid samples: "mean" (Σ ℓ / #valid; 0 when none), "sum", "none" ([M])."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if reduction == "none":
        return jnp.where(valid > 0, losses, 0.0)
    total = jnp.sum(jnp.where(valid > 0, losses, 0.0))
    return total if reduction == "sum" else total / jnp.maximum(jnp.sum(valid), 1.0)


@dataclasses.dataclass(frozen=True)
class ClassMeanPrototypes:
    """Streaming class-mean prototypes (the spec's replacement for linear probing after SCL).

    sums [K, D] accumulate normalize(z_i) per class, counts [K] the samples; `prototypes()` is
    p_c = normalize(sums_c / n_c) and `predict(z)` is argmax_c ⟨normalize(z), p_c⟩.
    """

    sums: np.ndarray
    counts: np.ndarray

    @classmethod
    def empty(cls, num_classes: int, dim: int) -> ClassMeanPrototypes:
        return cls(np.zeros((num_classes, dim), np.float64), np.zeros((num_classes,), np.int64))

    def update(self, features: np.ndarray, labels: np.ndarray) -> ClassMeanPrototypes:
        """Adds a batch z [M, D], y [M]; returns the new accumulator."""
        features, labels = np.asarray(features, np.float64), np.asarray(labels)
        check_labels(jnp.asarray(labels), features.shape[0], self.counts.shape[0])
        if features.ndim != 2 or features.shape[1] != self.sums.shape[1]:
            raise ValueError(f"features must have shape [M, {self.sums.shape[1]}], got shape {features.shape}")
        unit = features / np.maximum(np.linalg.norm(features, axis=1, keepdims=True), 1e-12)
        sums = self.sums.copy()
        np.add.at(sums, labels, unit)
        return ClassMeanPrototypes(sums, self.counts + np.bincount(labels, minlength=self.counts.shape[0]))

    def prototypes(self) -> np.ndarray:
        """p [K, D] float64; ValueError naming the classes that received no sample."""
        empty = np.flatnonzero(self.counts == 0)
        if empty.size:
            raise ValueError(f"labels: classes {empty.tolist()} have no samples, so they have no class mean")
        means = self.sums / self.counts[:, None]
        return means / np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-12)

    def predict(self, features: np.ndarray) -> np.ndarray:
        """argmax_c ⟨normalize(z_i), p_c⟩ [M] for z [M, D]."""
        return np.argmax(np.asarray(features, np.float64) @ self.prototypes().T, axis=1)
