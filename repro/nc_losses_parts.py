"""The pieces of the NC-losses reproduction: a digits classifier, its training loop, and its evaluation.

One cell = one loss (a registered objective) and one seed: the zoo's attention classifier is trained with
AdamW on digits batches from the zoo's own pipeline, and at evenly spaced steps the pooled features of the
whole train split (1,437 images) and test split (360) are read out (`nc_objectives.pooled_features`) to measure
the NC metrics on the train features and the test accuracy of the cell's classifier.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from icml26zoo.losses.nc_metrics import nc_report
from icml26zoo.losses.nc_objectives import head_prototypes, objective_name, pooled_features
from icml26zoo.losses.neural_collapse import ClassMeanPrototypes, simplex_etf
from icml26zoo.models import build_model
from icml26zoo.models.config import ModelConfig
from icml26zoo.registry import OBJECTIVES
from icml26zoo.train.config import DataConfig, OptimConfig
from icml26zoo.train.data import make_train_iterator
from icml26zoo.train.data.digits import NUM_CLASSES, VOCAB_SIZE
from icml26zoo.train.data.pipeline import make_eval_iterator
from icml26zoo.train.optim import build_optimizer
from icml26zoo.train.step import objective_loss

# method -> (loss, prototypes); "ce" is the zoo's `classification` objective (linear head, no bias).
METHODS = {"ce": ("ce", "learned"), "normface": ("normface", "learned"), "ntce": ("ntce", "learned"),
           "nonl": ("nonl", "learned"), "ntce_etf": ("ntce", "etf"), "nonl_etf": ("nonl", "etf"),
           "scl": ("scl", "learned")}
SEQ_LEN = 64


@dataclasses.dataclass(frozen=True)
class CellSettings:
    """The model width/depth and optimizer shared by every cell."""

    d_model: int = 32
    num_layers: int = 1
    learning_rate: float = 1e-2
    weight_decay: float = 1e-4


def objective_for(method: str) -> str:
    """The registered objective name of `method`."""
    loss, prototypes = METHODS[method]
    return "classification" if loss == "ce" else objective_name(loss, NUM_CLASSES, prototypes)


def model_config(settings: CellSettings) -> ModelConfig:
    return ModelConfig(name="llama", mixer="attention", vocab_size=VOCAB_SIZE, d_model=settings.d_model,
                       num_layers=settings.num_layers, num_heads=4, num_kv_heads=2, max_seq_len=SEQ_LEN)


def split_batches(data: DataConfig, split: str, batch_size: int, rows: int | None = None) -> list[dict[str, jax.Array]]:
    """Every row of `split` in stored order (or its first `rows`, rounded up to whole batches), as batches (the
    last padded: segment_ids 0, weights 0)."""
    source = dataclasses.replace(data, eval_split=split)
    if rows is not None:
        batch_size = min(batch_size, rows)
    max_batches = 0 if rows is None else -(-rows // batch_size)
    iterator = make_eval_iterator(source, batch_size=batch_size, seq_len=SEQ_LEN, max_batches=max_batches)
    return [{k: jnp.asarray(v) for k, v in batch.items()} for batch in iterator]


@dataclasses.dataclass
class Readout:
    """Features of one split: z [N, D] float64 and labels [N]."""

    features: np.ndarray
    labels: np.ndarray


def read_features(feature_fn: Callable[..., tuple[jax.Array, jax.Array]], params: dict,
                  batches: list[dict[str, jax.Array]], rows: int | None = None) -> Readout:
    """The features of the real rows of `batches` (the first `rows` of them when given)."""
    features, labels = [], []
    for batch in batches:
        z, valid = feature_fn(params, batch)
        keep = np.asarray(valid) > 0
        features.append(np.asarray(z, np.float64)[keep])
        labels.append(np.asarray(batch["labels"])[keep])
    return Readout(np.concatenate(features)[:rows], np.concatenate(labels)[:rows])


def classifier_weights(method: str, model: nnx.Module, train: Readout) -> np.ndarray:
    """The cell's classifier rows [K, D]: head columns, the fixed ETF, or (SCL) training class means."""
    loss, prototypes = METHODS[method]
    if loss == "scl":
        return ClassMeanPrototypes.empty(NUM_CLASSES, train.features.shape[1]).update(
            train.features, train.labels).prototypes()
    if prototypes == "etf":
        return simplex_etf(NUM_CLASSES, train.features.shape[1]).astype(np.float64)
    return np.asarray(head_prototypes(model, NUM_CLASSES), np.float64)


def accuracy(method: str, weights: np.ndarray, readout: Readout) -> float:
    """Test accuracy: argmax ⟨h, w_c⟩ for CE (the raw linear head), argmax cosine otherwise."""
    features = readout.features
    if METHODS[method][0] != "ce":
        features = features / np.maximum(np.linalg.norm(features, axis=1, keepdims=True), 1e-300)
        weights = weights / np.maximum(np.linalg.norm(weights, axis=1, keepdims=True), 1e-300)
    return float(np.mean(np.argmax(features @ weights.T, axis=1) == readout.labels))


def class_mean_accuracy(train: Readout, test: Readout) -> float:
    """Test accuracy of the fixed class-mean prototype classifier fit on the train features (any loss)."""
    prototypes = ClassMeanPrototypes.empty(NUM_CLASSES, train.features.shape[1]).update(train.features, train.labels)
    return float(np.mean(prototypes.predict(test.features) == test.labels))


def evaluate(method: str, model: nnx.Module, train: Readout, test: Readout) -> dict[str, float]:
    weights = classifier_weights(method, model, train)
    record = nc_report(train.features, train.labels, weights, NUM_CLASSES)
    record["test_accuracy"] = accuracy(method, weights, test)
    record["class_mean_test_accuracy"] = class_mean_accuracy(train, test)
    return record


def train_cell(method: str, *, data: DataConfig, settings: CellSettings, steps: int, batch_size: int, seed: int,
               eval_steps: list[int], readout_rows: int | None = None) -> list[dict[str, float]]:
    """Trains one cell; returns one record (step, train loss, NC metrics, accuracies) per step in eval_steps.
    The records read the features of the whole train and test splits, or of their first `readout_rows` rows."""
    model = build_model(model_config(settings), rngs=nnx.Rngs(seed))
    graphdef, state = nnx.split(model, nnx.Param)
    params = nnx.to_pure_dict(state)
    optim = OptimConfig(learning_rate=settings.learning_rate, warmup_steps=max(1, steps // 20),
                        weight_decay=settings.weight_decay)
    optimizer = build_optimizer(optim, steps)
    loss_fn = objective_loss(graphdef, OBJECTIVES.get(objective_for(method)), jax.random.key(seed))

    @jax.jit
    def step(params: dict, opt_state: optax.OptState, batch: dict) -> tuple[dict, optax.OptState, jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(params, batch)
        # optax mixes Python floats and int32 step counts, as the trainer's own step allows.
        with jax.numpy_dtype_promotion("standard"):
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

    @jax.jit
    def features(params: dict, batch: dict) -> tuple[jax.Array, jax.Array]:
        return pooled_features(nnx.merge(graphdef, params), batch)

    train_batches = split_batches(data, "train", 256, readout_rows)
    test_batches = split_batches(data, "test", 256, readout_rows)
    iterator = make_train_iterator(data, batch_size=batch_size, seq_len=SEQ_LEN, seed=seed)
    opt_state, losses = optimizer.init(params), []

    def record(index: int) -> dict[str, float]:
        metrics = evaluate(method, nnx.merge(graphdef, params),
                           read_features(features, params, train_batches, readout_rows),
                           read_features(features, params, test_batches, readout_rows))
        recent = losses[-max(1, steps // 20):]
        return {"step": index, "train_loss": float(np.mean(recent)) if recent else float("nan"), **metrics}

    records = [record(0)] if 0 in eval_steps else []
    for index in range(1, steps + 1):
        batch = {k: jnp.asarray(v) for k, v in next(iterator).items()}
        params, opt_state, loss = step(params, opt_state, batch)
        losses.append(float(loss))
        if index in eval_steps:
            records.append(record(index))
    return records
