"""Probes from every layer's hidden states to a per-token target: a linear probe and a 2-layer MLP probe per
layer, scored on held-out tokens (accuracy for classification, R² for regression).

Use (the PCFG paper, docs/papers/pcfg_probing.md: which parse quantities each layer encodes, the local-to-global claim):

    features = layer_features(model, tokens, segment_ids=segment_ids, mask=mask)   # [L+1, N, D]
    scores = probe_layers(features, targets, task="regression")                    # one ProbeScore per layer
    print(scores_table(scores))

Hidden states come from `zoo.diagnostics.capture.capture_forward` (any registered decoder LM): layer l is the
residual stream before block l, layer 0 the embeddings, layer L the last block's output before the final
norm. Probes train on frozen features, standardized with the training tokens' mean and deviation.

  linear   closed-form ridge regression (regression), or multinomial logistic regression trained
           full-batch with optax.adamw (classification)
  mlp      one hidden ReLU layer trained full-batch with optax.adamw on squared error (regression) or
           softmax cross-entropy (classification)

Tokens are split once into training and held-out sets (`holdout` fraction, from `seed`), the same for
every layer; with `groups` (e.g. the sentence of each token) whole groups are held out, so that no group has
tokens on both sides (tokens of one sentence share context, and a token-level split leaks it). R² of a
multi-column target pools the columns: 1 - Σ SSE / Σ SST.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from icml26zoo.diagnostics.capture import capture_forward

Task = Literal["classification", "regression"]


@dataclasses.dataclass(frozen=True)
class ProbeScore:
    """Held-out score of the linear and MLP probes at one layer (accuracy or R², per `metric`)."""

    layer: int
    linear: float
    mlp: float
    metric: str


def layer_features(model: nnx.Module, tokens: jax.Array, *, segment_ids: jax.Array | None = None,
                   mask: np.ndarray | None = None) -> np.ndarray:
    """float32 [L+1, N, D]: every layer's hidden state at the N positions where mask [B, T] is true (all if None)."""
    graphdef, state = nnx.split(model)

    @jax.jit
    def hidden_states(state, tokens, segment_ids):
        captured = capture_forward(nnx.merge(graphdef, state), tokens, segment_ids=segment_ids,
                                   materialize_attention=False)
        return captured["hidden"]

    hidden = np.asarray(hidden_states(state, tokens, segment_ids), np.float32)
    if mask is None:
        mask = np.ones(hidden.shape[1:3], bool)
    mask = np.asarray(mask, bool)
    if mask.shape != hidden.shape[1:3]:
        raise ValueError(f"mask must have the tokens' shape {hidden.shape[1:3]}, got {mask.shape}")
    return hidden[:, mask]


def split_indices(count: int, holdout: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training indices, held-out indices) of `count` samples, a `holdout` fraction held out (>= 1 each)."""
    if not 0 < holdout < 1:
        raise ValueError(f"holdout must lie in (0, 1), got {holdout!r}")
    order = np.random.default_rng(seed).permutation(count)
    held = min(max(int(round(holdout * count)), 1), count - 1)
    return order[held:], order[:held]


def split_groups(groups: np.ndarray, holdout: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training indices, held-out indices) of samples labelled by groups [N]: a `holdout` fraction of the
    distinct groups (>= 1 each side, from `seed`) is held out with all of its samples."""
    if not 0 < holdout < 1:
        raise ValueError(f"holdout must lie in (0, 1), got {holdout!r}")
    groups = np.asarray(groups)
    if groups.ndim != 1:
        raise ValueError(f"groups must be one label per sample [N], got shape {groups.shape}")
    names = np.unique(groups)
    if names.size < 2:
        raise ValueError(f"groups must hold at least 2 distinct labels to split, got {names.size}")
    _, held_names = split_indices(names.size, holdout, seed)
    held = np.isin(groups, names[held_names])
    return np.flatnonzero(~held), np.flatnonzero(held)


def r2_score(truth: np.ndarray, predicted: np.ndarray) -> float:
    """1 - Σ SSE / Σ SST over all target columns [N, K] (variance-weighted: a nearly constant column, e.g. a
    word the grammar rarely allows, cannot dominate); SST against each column's held-out mean."""
    truth, predicted = truth.reshape(truth.shape[0], -1), predicted.reshape(predicted.shape[0], -1)
    total = float(np.sum((truth - truth.mean(axis=0)) ** 2))
    if total <= 0.0:
        raise ValueError("the held-out targets are constant: R² is undefined")
    return 1.0 - float(np.sum((truth - predicted) ** 2)) / total


def fit_ridge(x: np.ndarray, y: np.ndarray, ridge: float) -> np.ndarray:
    """[D + 1, K] float64 weights (last row the bias) minimizing |[x 1] W - y|² + ridge |W without bias|²."""
    design = np.concatenate([x, np.ones((x.shape[0], 1))], axis=1).astype(np.float64)
    penalty = ridge * np.eye(design.shape[1])
    penalty[-1, -1] = 0.0
    return np.linalg.solve(design.T @ design + penalty, design.T @ y.astype(np.float64))


def predict_ridge(weights: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.concatenate([x, np.ones((x.shape[0], 1))], axis=1) @ weights


def _one_hot(labels: np.ndarray, classes: int) -> np.ndarray:
    return np.eye(classes)[labels]


@functools.partial(jax.jit, static_argnames=("classification", "width", "steps"))
def _train_probe(x: jax.Array, y: jax.Array, key: jax.Array, *, classification: bool, width: int, steps: int,
                 learning_rate: float, weight_decay: float) -> dict[str, jax.Array]:
    """Full-batch AdamW on x [N, D] -> [N, K]: a ReLU MLP of `width` hidden units, or linear when width = 0.

    y is one-hot (classification: softmax cross-entropy) or the targets (squared error).
    """
    first, second = jax.random.split(key)
    params = {"w2": jnp.zeros((x.shape[1], y.shape[1])), "b2": jnp.zeros(y.shape[1])}
    if width:
        params = {"w1": jax.random.normal(first, (x.shape[1], width)) / np.sqrt(x.shape[1]),
                  "b1": jnp.zeros(width), "w2": jax.random.normal(second, (width, y.shape[1])) / np.sqrt(width),
                  "b2": jnp.zeros(y.shape[1])}
    optimizer = optax.adamw(learning_rate, weight_decay=weight_decay)

    def loss(params):
        out = _forward(params, x)
        if classification:
            return jnp.mean(optax.losses.softmax_cross_entropy(out, y))
        return jnp.mean(optax.losses.squared_error(out, y))

    def step(_, carry):
        params, state = carry
        updates, state = optimizer.update(jax.grad(loss)(params), state, params)
        return optax.apply_updates(params, updates), state

    # optax mixes Python floats with int32 step counts, which strict dtype promotion rejects.
    with jax.numpy_dtype_promotion("standard"):
        return jax.lax.fori_loop(0, steps, step, (params, optimizer.init(params)))[0]


def _forward(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    if "w1" in params:
        x = jax.nn.relu(x @ params["w1"] + params["b1"])
    return x @ params["w2"] + params["b2"]


@dataclasses.dataclass(frozen=True)
class ProbeSettings:
    """ridge: the linear probe's L2 penalty; width, steps, learning_rate, weight_decay: the MLP probe's training."""

    ridge: float = 1e-3
    width: int = 64
    steps: int = 300
    learning_rate: float = 1e-2
    weight_decay: float = 1e-2


def _fitted_outputs(train_x: np.ndarray, train_y: np.ndarray, held_x: np.ndarray, *, classification: bool,
                    width: int, seed: int, settings: ProbeSettings) -> np.ndarray:
    """[N_held, K] outputs on held_x of a probe (`_train_probe`, width 0 = linear) trained on (train_x, train_y)."""
    params = _train_probe(jnp.asarray(train_x, jnp.float32), jnp.asarray(train_y, jnp.float32), jax.random.key(seed),
                          classification=classification, width=width, steps=settings.steps,
                          learning_rate=settings.learning_rate, weight_decay=settings.weight_decay)
    return np.asarray(_forward(params, jnp.asarray(held_x, jnp.float32)), np.float64)


def _check_targets(features: np.ndarray, targets: np.ndarray, task: str) -> np.ndarray:
    if features.ndim != 3:
        raise ValueError(f"features must be [layers, N, D], got shape {features.shape}")
    if task not in ("classification", "regression"):
        raise ValueError(f"task must be 'classification' or 'regression', got {task!r}")
    targets = np.asarray(targets)
    if targets.shape[0] != features.shape[1]:
        raise ValueError(f"targets must have one row per token ({features.shape[1]}), got shape {targets.shape}")
    if task == "classification":
        if targets.ndim != 1 or not np.issubdtype(targets.dtype, np.integer) or targets.min() < 0:
            raise ValueError(f"classification targets must be non-negative integer labels [N], got {targets.dtype} "
                             f"{targets.shape}")
        return targets.astype(np.int64)
    if not np.all(np.isfinite(targets)):
        raise ValueError("regression targets must be finite")
    return targets.reshape(targets.shape[0], -1).astype(np.float64)


def probe_layers(features: np.ndarray, targets: np.ndarray, *, task: Task, holdout: float = 0.25, seed: int = 0,
                 settings: ProbeSettings = ProbeSettings(), groups: np.ndarray | None = None) -> list[ProbeScore]:
    """Linear and MLP probe scores per layer of features [L+1, N, D] for targets [N] (labels) or [N] / [N, K].

    groups [N] (optional): a label per token (e.g. its sentence); whole groups are held out (`split_groups`),
    otherwise tokens are (`split_indices`). Returns one ProbeScore per layer: held-out accuracy
    (classification) or R² (regression).
    """
    targets = _check_targets(features, targets, task)
    classification = task == "classification"
    if groups is None:
        train, held = split_indices(features.shape[1], holdout, seed)
    elif np.shape(groups) != (features.shape[1],):
        raise ValueError(f"groups must have one label per token ({features.shape[1]}), got shape {np.shape(groups)}")
    else:
        train, held = split_groups(groups, holdout, seed)
    if classification:
        classes = int(targets.max()) + 1
        fit_to = _one_hot(targets, classes)
    else:
        fit_to = targets
    scores = []
    for layer, x in enumerate(np.asarray(features, np.float64)):
        mean, std = x[train].mean(axis=0), x[train].std(axis=0) + 1e-8
        x = (x - mean) / std
        fitted = functools.partial(_fitted_outputs, x[train], fit_to[train], x[held], classification=classification,
                                   seed=seed, settings=settings)
        mlp = fitted(width=settings.width)
        if classification:
            linear_score = float(np.mean(fitted(width=0).argmax(axis=1) == targets[held]))
            mlp_score = float(np.mean(mlp.argmax(axis=1) == targets[held]))
        else:
            linear = predict_ridge(fit_ridge(x[train], fit_to[train], settings.ridge), x[held])
            linear_score, mlp_score = r2_score(targets[held], linear), r2_score(targets[held], mlp)
        scores.append(ProbeScore(layer, linear_score, mlp_score, "accuracy" if classification else "R²"))
    return scores


def scores_table(scores: list[ProbeScore], title: str = "") -> str:
    """A markdown table: layer, linear probe, MLP probe (the metric in the header)."""
    metric = scores[0].metric if scores else "score"
    head = f"{title}\n\n" if title else ""
    lines = [f"| layer | linear {metric} | MLP {metric} |", "|---:|---:|---:|"]
    lines += [f"| {s.layer} | {s.linear:.3f} | {s.mlp:.3f} |" for s in scores]
    return head + "\n".join(lines)
