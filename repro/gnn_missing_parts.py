"""Full-batch GCN training for the gnn_missing experiment: GNNmim vs mean imputation under a missingness
mechanism (early stopping on validation macro-F1, as the official GNNmim code), and adaptive feature selection
by permutation importance (a reconstruction) against all features and a random subset of the same size.

Training is one `jax.lax.scan` over epochs of full-batch Adam (the graph is one batch), jitted once per input
width; the shared sequence trainer (`icml26zoo.train`) streams token batches and does not fit node
classification on one graph.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from icml26zoo import graphs
from icml26zoo.optim.hparams import with_standard_promotion

__all__ = ["METHODS", "SELECTORS", "Split", "TrainConfig", "anfs_run", "fit_early_stopping", "missing_inputs",
           "split_nodes"]

METHODS = ("gnnmim", "gcnmi")
SELECTORS = ("all", "anfs", "random")


class Split(NamedTuple):
    """Boolean node masks [N]: train, validation, test."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray


class TrainConfig(NamedTuple):
    """GCN and Adam settings (GNNmim: hidden 128, dropout 0.5, lr 0.01, 500 epochs, patience 50)."""

    hidden: int = 128
    dropout: float = 0.5
    lr: float = 0.01
    epochs: int = 500
    patience: int = 50


def split_nodes(labels: np.ndarray, seed: int) -> Split:
    """Stratified split as the official code: 20% test, then 12.5% of the rest validation (70/10/20)."""
    rng = np.random.default_rng(seed)
    test, val = np.zeros(len(labels), bool), np.zeros(len(labels), bool)
    for label in np.unique(labels):
        nodes = rng.permutation(np.flatnonzero(labels == label))
        n_test = int(round(0.2 * len(nodes)))
        n_val = int(round(0.125 * (len(nodes) - n_test)))
        test[nodes[:n_test]] = True
        val[nodes[n_test:n_test + n_val]] = True
    return Split(train=~(test | val), val=val, test=test)


def missing_inputs(method: str, x: np.ndarray, mask: np.ndarray) -> jax.Array:
    """GNNmim's [X̃, 1 − M] [N, 2D] or gcnmi's column-mean imputation [N, D]."""
    return graphs.gnnmim_inputs(x, mask) if method == "gnnmim" else graphs.mean_impute(x, mask)


def _adam(learning_rate: float) -> optax.GradientTransformation:
    """optax.adam traced under standard dtype promotion (its bias correction mixes a float and an int32,
    which the test suite's strict promotion rejects)."""
    return with_standard_promotion(optax.adam(learning_rate))


def _cross_entropy(logits: jax.Array, labels: jax.Array, where: jax.Array) -> jax.Array:
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    return jnp.sum(jnp.where(where, losses, 0.0)) / jnp.sum(where.astype(losses.dtype))


def _logits(graphdef: Any, params: Any, x: jax.Array, graph: tuple[jax.Array, jax.Array],
            key: jax.Array | None = None) -> jax.Array:
    return nnx.merge(graphdef, params)(x, *graph, dropout_key=key)


def _adam_step(graphdef: Any, tx: optax.GradientTransformation, params: Any, opt_state: Any, key: jax.Array,
               x: jax.Array, graph: tuple[jax.Array, jax.Array], labels: jax.Array,
               train: jax.Array) -> tuple[Any, Any]:
    grads = jax.grad(lambda p: _cross_entropy(_logits(graphdef, p, x, graph, key), labels, train))(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state


@functools.partial(jax.jit, static_argnames=("graphdef", "config", "num_classes"))
def _fit(graphdef: Any, params: Any, key: jax.Array, x: jax.Array, graph: tuple[jax.Array, jax.Array],
         labels: jax.Array, train: jax.Array, val: jax.Array, *, config: TrainConfig,
         num_classes: int) -> tuple[Any, jax.Array, jax.Array]:
    """Adam for up to `config.epochs` epochs; after each, validation macro-F1; training stops once it has not
    improved for `patience` epochs. Returns (best parameters, best validation macro-F1, its epoch)."""
    tx = _adam(config.lr)

    def running(carry: tuple) -> jax.Array:
        index, best_epoch = carry[0], carry[5]
        return (index <= config.epochs) & (index - best_epoch <= config.patience)

    def epoch(carry: tuple) -> tuple:
        index, params, opt_state, best, best_f1, best_epoch, key = carry
        key, sub = jax.random.split(key)
        params, opt_state = _adam_step(graphdef, tx, params, opt_state, sub, x, graph, labels, train)
        predictions = jnp.argmax(_logits(graphdef, params, x, graph), axis=1)
        f1 = graphs.macro_f1(labels, predictions, num_classes, where=val)
        better = f1 > best_f1
        best = jax.tree.map(lambda b, p: jnp.where(better, p, b), best, params)
        return (index + 1, params, opt_state, best, jnp.where(better, f1, best_f1),
                jnp.where(better, index, best_epoch), key)

    carry = (jnp.array(1), params, tx.init(params), params, jnp.array(-1.0), jnp.array(0), key)
    _, _, _, best, best_f1, best_epoch, _ = jax.lax.while_loop(running, epoch, carry)
    return best, best_f1, best_epoch


def fit_early_stopping(x: jax.Array, labels: np.ndarray, graph: graphs.GraphsTuple, split: Split, *,
                       config: TrainConfig, seed: int) -> dict[str, float]:
    """Trains a fresh GCN on inputs x [N, F]; returns test macro-F1 and accuracy of the best-validation
    weights, the validation macro-F1 and the epoch they come from."""
    num_classes = int(labels.max()) + 1
    model = graphs.GCN(x.shape[1], config.hidden, num_classes, dropout=config.dropout, rngs=nnx.Rngs(seed))
    graphdef, params = nnx.split(model)
    edges = (graph.senders, graph.receivers)
    labels_j = jnp.asarray(labels)
    best, val_f1, epoch = _fit(graphdef, params, jax.random.key(seed), x, edges, labels_j, jnp.asarray(split.train),
                               jnp.asarray(split.val), config=config, num_classes=num_classes)
    predictions = jnp.argmax(_logits(graphdef, best, x, edges), axis=1)
    test = jnp.asarray(split.test)
    return {"test_f1": float(graphs.macro_f1(labels_j, predictions, num_classes, where=test)),
            "test_acc": float(graphs.accuracy(labels_j, predictions, where=test)),
            "val_f1": float(val_f1), "epoch": int(epoch)}


@functools.partial(jax.jit, static_argnames=("graphdef", "config"))
def _train_steps(graphdef: Any, params: Any, opt_state: Any, key: jax.Array, x: jax.Array,
                 graph: tuple[jax.Array, jax.Array], labels: jax.Array, train: jax.Array, steps: jax.Array, *,
                 config: TrainConfig) -> tuple[Any, Any, jax.Array]:
    """`steps` full-batch Adam epochs on x [N, F] (inactive columns already zeroed); `steps` is traced, so
    every segment of the schedule shares one compiled program."""
    tx = _adam(config.lr)

    def epoch(_: jax.Array, carry: tuple) -> tuple:
        params, opt_state, key = carry
        key, sub = jax.random.split(key)
        return (*_adam_step(graphdef, tx, params, opt_state, sub, x, graph, labels, train), key)

    return jax.lax.fori_loop(0, steps, epoch, (params, opt_state, key))


@functools.partial(jax.jit, static_argnames=("graphdef", "repeats"))
def _importance(graphdef: Any, params: Any, key: jax.Array, x: jax.Array, graph: tuple[jax.Array, jax.Array],
                labels: jax.Array, val: jax.Array, *, repeats: int) -> jax.Array:
    """NPT scores [D] with M = negative validation cross-entropy (smoother than accuracy), evaluation mode."""
    return graphs.permutation_importance(
        lambda inputs: -_cross_entropy(_logits(graphdef, params, inputs, graph), labels, val), x, key,
        repeats=repeats)


def anfs_run(data: graphs.CSBM, split: Split, *, selector: str, config: TrainConfig, seed: int, warmup: int,
             every: int, repeats: int, fraction: float, threshold: float,
             random_size: int | None = None) -> dict[str, Any]:
    """Trains a GCN for `config.epochs` epochs on the features in the active set: "all" keeps every feature,
    "anfs" scores the active ones after `warmup` epochs and then every `every` epochs and prunes
    (`graphs.prune_features`), "random" keeps `random_size` random features from the start. Returns test
    accuracy, the final active set [D] and the score history (epoch, scores [D])."""
    x_full = jnp.asarray(data.graph.nodes)
    num_classes, dims = int(data.labels.max()) + 1, x_full.shape[1]
    rng = np.random.default_rng(seed + 1000)
    active = np.ones(dims, bool)
    if selector == "random":
        active[:] = False
        active[rng.choice(dims, size=random_size, replace=False)] = True
    model = graphs.GCN(dims, config.hidden, num_classes, dropout=config.dropout, rngs=nnx.Rngs(seed))
    graphdef, params = nnx.split(model)
    opt_state = _adam(config.lr).init(params)
    key = jax.random.key(seed)
    edges, labels = (data.graph.senders, data.graph.receivers), jnp.asarray(data.labels)
    train, val = jnp.asarray(split.train), jnp.asarray(split.val)
    schedule = [warmup] + [every] * ((config.epochs - warmup) // every)
    schedule[-1] += config.epochs - sum(schedule)
    history, done = [], 0
    for steps in schedule:
        x = x_full * jnp.asarray(active, x_full.dtype)
        params, opt_state, key = _train_steps(graphdef, params, opt_state, key, x, edges, labels, train,
                                              jnp.asarray(steps), config=config)
        done += steps
        if selector == "anfs" and done < config.epochs:
            key, sub = jax.random.split(key)
            scores = np.asarray(_importance(graphdef, params, sub, x, edges, labels, val, repeats=repeats))
            history.append((done, np.where(active, scores, np.nan)))
            active = graphs.prune_features(scores, active, threshold=threshold, fraction=fraction,
                                           min_features=1)
    x = x_full * jnp.asarray(active, x_full.dtype)
    predictions = jnp.argmax(_logits(graphdef, params, x, edges), axis=1)
    return {"test_acc": float(graphs.accuracy(labels, predictions, where=jnp.asarray(split.test))),
            "active": active, "history": history}
