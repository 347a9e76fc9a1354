"""Registered neural-collapse objectives: NormFace, NTCE, NONL and SupCon on any zoo classifier's features.

A row's feature z [D] is the mean over its real tokens (segment_ids > 0) of the model's final hidden state
(after the final norm, before the output head): exactly what the `classification` objective's mean-pooled
logits apply the head to. The class prototypes are either the model's own output-head columns 0 .. K−1 (the
token ids a labelled dataset keeps out of its inputs), learned and L2-normalised, with no bias ("learned"), or
a fixed simplex ETF in the model's D dimensions ("etf"; K ≤ D + 1). The loss is the valid-sample mean
(`zoo.losses.neural_collapse`); metrics add up as the trainer expects: loss_sum, weight (rows with a defined
loss) and correct (rows whose nearest prototype by cosine is their label).

SupCon ("scl") uses one view per sample (the trainer's batch holds no augmentations, a deviation from the
paper's two views); it trains no prototypes, so its `correct` is the leave-one-out batch class-mean
classifier: the label of the nearest normalised mean of the other same-batch samples of each class.

The class count K is part of the objective's name, since an objective sees only (model, batch, rng):
`register_nc_objectives(K)` registers "nc_<loss>_k<K>" (learned prototypes) and "nc_<loss>_etf_k<K>"
for every loss in LOSSES; K = 4 (topics) and K = 10 (digits) are registered on import.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.losses.batch_fields import LABELLED_FIELDS, require_batch_fields
from icml26zoo.losses.neural_collapse import (
    check_labels,
    l2_normalize,
    nonl_losses,
    normface_losses,
    ntce_losses,
    simplex_etf,
    supcon_losses,
)
from icml26zoo.models.block import run_layers
from icml26zoo.registry import register_objective
from icml26zoo.validation import check_choice, check_int

Batch = dict[str, jax.Array]
# The spec's temperature for the normalised losses (README, CIFAR-100) and SupCon's.
TEMPERATURE = 0.1
SUPCON_TEMPERATURE = 0.07
LOSSES = ("normface", "ntce", "nonl", "scl")
PROTOTYPES = ("learned", "etf")
BUILTIN_CLASS_COUNTS = (4, 10)
# name -> objective, of the objectives this module has registered.
_REGISTERED: dict[str, Callable] = {}


def pooled_features(model: nnx.Module, batch: Batch) -> tuple[jax.Array, jax.Array]:
    """(z [B, D] float32: mean final hidden state over each row's real tokens, row_valid [B] float32).

    Runs the zoo decoder's own embedding, layers and final norm (the model's forward without its head).
    """
    for part in ("embed", "layers", "cfg", "final_norm"):
        if not hasattr(model, part):
            raise ValueError(f"model must be a zoo decoder (embed, layers, final_norm), got "
                             f"{type(model).__name__} without {part!r}")
    segment_ids, positions = batch["segment_ids"], batch["positions"]
    hidden = model.embed(batch["inputs"]).astype(jnp.dtype(model.cfg.compute_dtype))
    hidden, _ = run_layers(model.layers, hidden, cfg=model.cfg, segment_ids=segment_ids, positions=positions)
    if model.final_norm is not None:
        hidden = model.final_norm(hidden)
    mask = (segment_ids > 0).astype(jnp.float32)
    count = jnp.sum(mask, axis=1)
    pooled = jnp.sum(hidden.astype(jnp.float32) * mask[:, :, None], axis=1) / jnp.maximum(count, 1.0)[:, None]
    return pooled, (count > 0).astype(jnp.float32)


def head_prototypes(model: nnx.Module, num_classes: int) -> jax.Array:
    """The output head's class columns as prototypes w [K, D] (rows of the tied embedding when tied)."""
    if model.cfg.vocab_size < num_classes:
        raise ValueError(f"model.cfg.vocab_size must be >= num_classes = {num_classes}, got {model.cfg.vocab_size}")
    if model.head is None:
        return model.embed.embedding[...][:num_classes]
    return model.head[...][:, :num_classes].T


def prototypes_for(model: nnx.Module, num_classes: int, prototypes: str) -> jax.Array:
    """w [K, D]: the learned head columns, or the fixed simplex ETF (no gradient reaches it)."""
    if prototypes == "learned":
        return head_prototypes(model, num_classes)
    return jnp.asarray(simplex_etf(num_classes, model.cfg.d_model))


def leave_one_out_correct(features: jax.Array, labels: jax.Array, valid: jax.Array, num_classes: int) -> jax.Array:
    """[B] 1.0 where the nearest leave-one-out batch class mean (cosine) of sample i is class y_i."""
    unit = l2_normalize(features) * valid[:, None]
    one_hot = jax.nn.one_hot(labels, num_classes) * valid[:, None]
    sums = one_hot.T @ unit
    # Sample i's own contribution leaves its class's sum; a class with nothing left cannot be predicted.
    own = one_hot[:, :, None] * unit[:, None, :]
    others = sums[None] - own
    counts = jnp.sum(one_hot, axis=0)[None] - one_hot
    scores = jnp.einsum("bkd,bd->bk", l2_normalize(others), unit)
    scores = jnp.where(counts > 0, scores, -jnp.inf)
    return (jnp.argmax(scores, axis=1) == labels).astype(jnp.float32)


def make_nc_objective(loss: str, num_classes: int, prototypes: str = "learned",
                      temperature: float | None = None) -> Callable:
    """`objective(model, batch, rng) -> (loss, metrics)` for one of LOSSES with K classes."""
    check_choice("loss", loss, LOSSES)
    check_choice("prototypes", prototypes, PROTOTYPES)
    check_int("num_classes", num_classes, minimum=2)
    tau = (SUPCON_TEMPERATURE if loss == "scl" else TEMPERATURE) if temperature is None else temperature
    losses_fn = {"normface": normface_losses, "ntce": ntce_losses, "nonl": nonl_losses}.get(loss)
    name = objective_name(loss, num_classes, prototypes)

    def objective(model: nnx.Module, batch: Batch, rng: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
        del rng  # Deterministic.
        require_batch_fields(name, batch, LABELLED_FIELDS, dataset="digits")
        labels = batch["labels"]
        check_labels(labels, batch["inputs"].shape[0], num_classes)
        features, row_valid = pooled_features(model, batch)
        if loss == "scl":
            losses, valid = supcon_losses(features[:, None, :], labels, tau, row_valid)
            correct = leave_one_out_correct(features, labels, row_valid, num_classes) * row_valid
        else:
            weights = prototypes_for(model, num_classes, prototypes)
            losses, valid = losses_fn(features, weights, labels, tau, row_valid)
            scores = l2_normalize(features) @ l2_normalize(weights).T
            correct = (jnp.argmax(scores, axis=1) == labels).astype(jnp.float32) * row_valid
        loss_sum = jnp.sum(losses * valid)
        weight = jnp.sum(valid)
        metrics = {"loss_sum": loss_sum, "weight": weight, "correct": jnp.sum(correct)}
        return loss_sum / jnp.maximum(weight, 1.0), metrics

    objective.__name__ = name
    objective.__doc__ = f"{loss} with {prototypes} prototypes for {num_classes} classes (tau = {tau:g})."
    return objective


def objective_name(loss: str, num_classes: int, prototypes: str = "learned") -> str:
    """"nc_<loss>_k<K>" or "nc_<loss>_etf_k<K>" (SupCon has no prototypes: always "nc_scl_k<K>")."""
    fixed = "_etf" if prototypes == "etf" and loss != "scl" else ""
    return f"nc_{loss}{fixed}_k{num_classes}"


def register_nc_objectives(num_classes: int) -> list[str]:
    """Registers every loss × prototype kind for K classes (idempotent); returns the names."""
    names = []
    for loss in LOSSES:
        for kind in PROTOTYPES if loss != "scl" else ("learned",):
            name = objective_name(loss, num_classes, kind)
            if name not in _REGISTERED:
                _REGISTERED[name] = register_objective(name)(make_nc_objective(loss, num_classes, kind))
            names.append(name)
    return names


for _count in BUILTIN_CLASS_COUNTS:
    register_nc_objectives(_count)
