"""SCOPE of API (Adaptive Prototype Imputation, ICML 2026): class-temporal prototypes and their use.

Pure functions, following the official code (github KX-yolo/API, `trains/singleTask/model/april.py`, commit
ef641b3ceaaa3f9430a74bfc6e62f7e072f2939a): label binning, the epoch-end trimmed class mean (the 5% of a class's
cached samples farthest from the class centre discarded), the prototype contrastive loss, the test-time class
estimate from the available modalities and the choice of the DIAM source modality. Modalities are indexed
0 = text, 1 = audio, 2 = vision; prototypes of modality m are [C, T', d] with a ready flag [C] each.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from icml26zoo.validation import check_interval, check_positive

__all__ = ["NUM_CLASSES", "class_similarities", "cosine", "estimate_class", "label_to_class",
           "prototype_contrastive_loss", "select_source", "update_prototypes"]

NUM_CLASSES = 7  # c(y) = clip(round(y + 3), 0, 6) for sentiment y in [-3, 3]
_MASKED = -1e9  # similarity of a class whose prototype is not ready (as the reference), masked before exp


def label_to_class(labels: jax.Array) -> jax.Array:
    """Sentiment [B] -> class [B] int32: clip(round(y + 3), 0, 6), rounding half to even as Python's round."""
    return jnp.clip(jnp.round(jnp.asarray(labels, jnp.float32) + 3.0), 0, NUM_CLASSES - 1).astype(jnp.int32)


def cosine(a: jax.Array, b: jax.Array, eps: float = 1e-8) -> jax.Array:
    """Cosine similarity over the last axis, a·b / max(|a|·|b|, eps) (torch's cosine_similarity), broadcast."""
    dot = jnp.sum(a * b, axis=-1)
    return dot / jnp.maximum(jnp.linalg.norm(a, axis=-1) * jnp.linalg.norm(b, axis=-1), eps)


def update_prototypes(prototypes: jax.Array, ready: jax.Array, features: jax.Array, classes: jax.Array, *,
                      discard_rate: float = 0.05) -> tuple[jax.Array, jax.Array]:
    """One modality's epoch-end SCOPE update: (prototypes [C, T, d], ready [C]) from the epoch's cache.

    features [N, T, d] (detached projected sequences), classes [N] int. For every class with cached samples:
    each sample's temporal mean, their mean (the centre), keep the max(1, floor((1 - discard_rate) · n)) samples
    nearest the centre (Euclidean on temporal means), prototype = element-wise mean of the kept full sequences,
    ready. A class without samples keeps its previous prototype and flag.
    """
    check_interval("discard_rate", discard_rate, 0.0, 1.0, closed="left")
    num_classes = prototypes.shape[0]
    onehot = (classes[:, None] == jnp.arange(num_classes)[None, :]).astype(features.dtype)  # [N, C]
    counts = onehot.sum(0)
    means = features.mean(axis=1)  # [N, d]
    centres = jnp.einsum("nc,nd->cd", onehot, means, precision="highest") / jnp.maximum(counts, 1.0)[:, None]
    distances = jnp.linalg.norm(means - centres[classes], axis=-1)
    # Rank of each sample within its class by distance: sort by (class, distance), subtract the class's start.
    order = jnp.lexsort((distances, classes))
    starts = jnp.cumsum(counts) - counts
    rank = jnp.zeros_like(classes).at[order].set(jnp.arange(classes.shape[0]) - starts[classes[order]].astype(
        classes.dtype))
    keep_num = jnp.maximum(1.0, jnp.floor(jnp.float32(1.0 - discard_rate) * counts)).astype(classes.dtype)
    kept = onehot * (rank < keep_num[classes]).astype(features.dtype)[:, None]
    sums = jnp.einsum("nc,ntd->ctd", kept, features, precision="highest")
    fresh = sums / jnp.maximum(kept.sum(0), 1.0)[:, None, None]
    has = counts > 0
    return jnp.where(has[:, None, None], fresh, prototypes), ready | has


def class_similarities(x: jax.Array, prototypes: jax.Array, ready: jax.Array) -> jax.Array:
    """x [B, T, d], prototypes [C, T, d], ready [C] -> [B, C] cos(mean_t x, mean_t P[c]); -1e9 where not ready."""
    sims = cosine(x.mean(axis=1)[:, None, :], prototypes.mean(axis=1)[None, :, :])
    return jnp.where(ready[None, :], sims, _MASKED)


def prototype_contrastive_loss(projected: tuple[jax.Array, ...], classes: jax.Array,
                               prototypes: tuple[jax.Array, ...], ready: tuple[jax.Array, ...], *,
                               temperature: float, weights: tuple[float, ...] = (1.0, 1.0, 1.0)) -> jax.Array:
    """SCOPE's prototype contrastive loss (scalar).

    Per modality m: for samples whose class prototype is ready, when at least two classes are ready,
    -log softmax over the ready classes of cos(mean_t x, mean_t P_m[c]) / temperature at the true class, averaged
    over those samples; then the mean over modalities with a contributing sample, weighted by `weights`.
    projected: per modality [B, T', d]; classes [B] int; prototypes per modality [C, T', d]; ready [C] each.
    """
    check_positive("temperature", temperature)
    numerator, denominator = jnp.float32(0.0), jnp.float32(0.0)
    for x, protos, flags, weight in zip(projected, prototypes, ready, weights, strict=True):
        logits = class_similarities(x, jax.lax.stop_gradient(protos), flags) / temperature
        logits = jnp.where(flags[None, :], logits, _MASKED)
        nll = -jnp.take_along_axis(jax.nn.log_softmax(logits, axis=-1), classes[:, None], axis=-1)[:, 0]
        valid = flags[classes] & (flags.sum() >= 2)
        count = valid.sum()
        loss = jnp.where(valid, nll, 0.0).sum() / jnp.maximum(count, 1).astype(jnp.float32)
        present = (count > 0).astype(jnp.float32)
        numerator += weight * loss * present
        denominator += weight * present
    return jnp.where(denominator > 0, numerator / jnp.maximum(denominator, 1e-12), 0.0)


def estimate_class(projected: tuple[jax.Array, ...], available: jax.Array, prototypes: tuple[jax.Array, ...],
                   ready: tuple[jax.Array, ...]) -> jax.Array:
    """Test-time class [B] int32 from the available modalities only (-1 when none has a ready prototype).

    For each available modality with a ready prototype: similarities to the ready classes; the modality with the
    largest maximum similarity wins, ties broken by the lower entropy of softmax(similarities), then by the
    order text, audio, vision; its most similar class is the estimate. available: [B, 3] bool.
    """
    maxima, entropies, argmaxes, valids = [], [], [], []
    for m, (x, protos, flags) in enumerate(zip(projected, prototypes, ready, strict=True)):
        sims = class_similarities(x, protos, flags)
        probs = jax.nn.softmax(sims, axis=-1)
        entropies.append(-jnp.sum(probs * jnp.log(probs + 1e-10), axis=-1))
        maxima.append(sims.max(axis=-1))
        argmaxes.append(sims.argmax(axis=-1))
        valids.append(available[:, m] & flags.any())
    valid = jnp.stack(valids, axis=1)  # [B, 3]
    maximum = jnp.where(valid, jnp.stack(maxima, axis=1), -jnp.inf)
    best = maximum.max(axis=1, keepdims=True)
    candidate = valid & (maximum == best)
    chosen = jnp.argmin(jnp.where(candidate, jnp.stack(entropies, axis=1), jnp.inf), axis=1)
    classes = jnp.take_along_axis(jnp.stack(argmaxes, axis=1), chosen[:, None], axis=1)[:, 0]
    return jnp.where(valid.any(axis=1), classes, -1).astype(jnp.int32)


def select_source(projected: tuple[jax.Array, ...], available: jax.Array, prototypes: tuple[jax.Array, ...],
                  ready: tuple[jax.Array, ...], classes: jax.Array) -> jax.Array:
    """DIAM's source modality [B] int32: among the available modalities whose prototype of `classes` is ready,
    the one most similar to it (first in text, audio, vision order on ties); -1 when there is none."""
    safe = jnp.clip(classes, 0, None)
    scores = []
    for m, (x, protos, flags) in enumerate(zip(projected, prototypes, ready, strict=True)):
        sims = cosine(x.mean(axis=1), protos[safe].mean(axis=1))
        usable = available[:, m] & flags[safe] & (classes >= 0)
        scores.append(jnp.where(usable, sims, -jnp.inf))
    scores = jnp.stack(scores, axis=1)
    return jnp.where(jnp.isfinite(scores).any(axis=1), scores.argmax(axis=1), -1).astype(jnp.int32)
