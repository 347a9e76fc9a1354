"""The PMDO reproduction's model, methods and task-by-task loop (cross-domain class-incremental, 8×8 images).

A bias-free ReLU MLP 64 → H → H → 10 (GPM's PMNIST MLP is bias-free too, which keeps the projection exact on
old inputs) with one expanding head: all ten columns exist from the start, the classes not yet seen are masked to
−inf (`icml26zoo.optim.pmdo.masked_logits`). Every method is one `icml26zoo.optim.pmdo.pmdo` chain over the same
base optimiser (AdamW), with parts switched on or off (`METHOD_CONFIGS`); EWC adds its penalty to the loss.

Own optax loop rather than the shared trainer: the trainer trains one data set with one optimiser state, while
CD-CIL needs task boundaries (relevance masks at the start of each task, importance and GPM bases at its end,
new head columns, an accuracy-matrix evaluation after each task), and PMDO's update takes the mask and the bases
as extra arguments that the trainer's step does not pass.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from icml26zoo.optim import pmdo as pm
from icml26zoo.optim.pmdo_cdcil import CDCILTask, cil_metrics
from icml26zoo.optim.pmdo_gpm import basis_size, truncate_basis

__all__ = ["METHODS", "METHOD_CONFIGS", "Method", "RunResult", "forward", "init_mlp", "run_method"]

NUM_CLASSES = 10
INPUTS = 64
PROJECTED = ("l1", "l2")  # hidden layers carry GPM bases; the head's new columns must stay free


@dataclasses.dataclass(frozen=True)
class Method:
    """A method: PMDO's switches (`cfg`), whether it uses the mask tree at all, and EWC's λ (0: no EWC)."""

    cfg: pm.PMDOConfig
    masked: bool
    ewc_lambda: float = 0.0


_OFF = dict(use_mask=False, project=False, ema_alpha=1.0, eval_weights="fast")
METHOD_CONFIGS: dict[str, Method] = {
    "finetune": Method(pm.PMDOConfig(**_OFF), masked=False),
    "ewc": Method(pm.PMDOConfig(**_OFF), masked=False, ewc_lambda=1.0),  # λ set per run (ewc_lambdas)
    "mask_only": Method(pm.PMDOConfig(project=False, ema_alpha=1.0, eval_weights="fast"), masked=True),
    "gpm": Method(pm.PMDOConfig(use_mask=False, ema_alpha=1.0, eval_weights="fast"), masked=False),
    "regulation_only": Method(pm.PMDOConfig(use_mask=False), masked=False),
    "pmdo": Method(pm.PMDOConfig(), masked=True),
}
METHODS = tuple(METHOD_CONFIGS)


def init_mlp(seed: int, hidden: int) -> dict[str, dict[str, jax.Array]]:
    """Bias-free MLP params: l1 [64, H], l2 [H, H], head [H, 10]; kernels N(0, 1/fan_in), float32 (drawn with
    numpy: no compiled initialiser per width)."""
    rng = np.random.default_rng(seed)
    shapes = {"l1": (INPUTS, hidden), "l2": (hidden, hidden), "head": (hidden, NUM_CLASSES)}
    return {name: {"kernel": jnp.asarray(rng.normal(0.0, shape[0] ** -0.5, shape), jnp.float32)}
            for name, shape in shapes.items()}


def forward(params: Any, x: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """x [B, 64] -> (logits [B, 10], the inputs of each projected layer {"l1": [B, 64], "l2": [B, H]})."""
    h1 = jax.nn.relu(x @ params["l1"]["kernel"])
    h2 = jax.nn.relu(h1 @ params["l2"]["kernel"])
    return h2 @ params["head"]["kernel"], {"l1": x, "l2": h1}


def _loss(params: Any, batch: tuple[jax.Array, jax.Array, jax.Array]) -> jax.Array:
    """Cross-entropy of batch (x [B, 64], y [B], active bool [10]) over the active classes; inactive logits are
    −inf before the softmax."""
    x, y, active = batch
    logits = pm.masked_logits(forward(params, x)[0], active)
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, y))


def _ewc_penalty(params: Any, anchor: Any, fisher: Any) -> jax.Array:
    return 0.5 * sum(jnp.sum(f * (p - a) ** 2) for p, a, f in zip(jax.tree.leaves(params), jax.tree.leaves(anchor),
                                                                    jax.tree.leaves(fisher), strict=True))


@functools.cache
def _train_task_fn(cfg: pm.PMDOConfig, learning_rate: float, weight_decay: float, use_ewc: bool):
    """One jitted task: a scan of PMDO steps over the index rows [S, B] into the padded task data."""
    opt = pm.pmdo(optax.adamw(learning_rate, weight_decay=weight_decay), cfg)

    def train(params, opt_state, data_x, data_y, order, active, mask, bases, ewc):
        def loss_fn(p, batch):
            value = _loss(p, (*batch, active))
            if use_ewc:
                value = value + ewc["lambda"] * _ewc_penalty(p, ewc["anchor"], ewc["fisher"])
            return value

        def step(carry, rows):
            p, s = carry
            loss, grad = pm.masked_sam_gradient(loss_fn, p, (data_x[rows], data_y[rows]), rho=cfg.sam_rho,
                                                mask=mask, bases=bases)
            updates, s = opt.update(grad, s, p, mask=mask, bases=bases)
            return (optax.apply_updates(p, updates), s), loss

        (params, opt_state), losses = jax.lax.scan(step, (params, opt_state), order)
        return params, opt_state, losses

    return opt, jax.jit(train)


@jax.jit
def _predict(params: Any, x: jax.Array, active: jax.Array) -> jax.Array:
    return jnp.argmax(pm.masked_logits(forward(params, x)[0], active), axis=-1)


def _batches(task: CDCILTask, batch_size: int, rng: np.random.Generator, active: jax.Array) -> list[tuple]:
    """One shuffled epoch of (x, y, active) batches (the relevance and importance passes)."""
    order = rng.permutation(task.train_y.size)
    count = max(1, task.train_y.size // batch_size)
    return [(jnp.asarray(task.train_x[order[i * batch_size:(i + 1) * batch_size]]),
             jnp.asarray(task.train_y[order[i * batch_size:(i + 1) * batch_size]]), active) for i in range(count)]


def _head_mask(mask: Any, importance: Any, current: np.ndarray, seen_before: np.ndarray, head_old: str) -> Any:
    """The head kernel's mask: 1 on the current classes' columns, 0 (frozen) or 1 − A on old ones, 0 elsewhere."""
    old = (1.0 - importance["head"]["kernel"]) if head_old == "importance" else 0.0
    column = jnp.where(jnp.asarray(current), 1.0, jnp.where(jnp.asarray(seen_before), old, 0.0))
    return {**mask, "head": {"kernel": jnp.broadcast_to(column, mask["head"]["kernel"].shape).astype(jnp.float32)}}


class RunResult(NamedTuple):
    """acc a[t, j] [T, T] (upper triangle 0), the metrics of `cil_metrics`, mean(1 − A) per layer after each
    task {layer: [T]} (masked methods), and the GPM basis sizes after each task {layer: [T]}."""

    acc: np.ndarray
    metrics: dict[str, Any]
    capacity: dict[str, list[float]]
    basis_sizes: dict[str, list[int]]


def _ewc_state(params: Any) -> dict[str, Any]:
    zeros = jax.tree.map(jnp.zeros_like, params)
    return {"anchor": params, "fisher": zeros, "lambda": jnp.float32(0.0)}


def run_method(method: Method, tasks: list[CDCILTask], *, seed: int, hidden: int, epochs: int, batch_size: int,
               learning_rate: float, weight_decay: float) -> RunResult:
    """Trains one method task by task from `seed` and returns its accuracy matrix and metrics."""
    cfg = method.cfg
    use_ewc = method.ewc_lambda > 0
    opt, train = _train_task_fn(cfg, learning_rate, weight_decay, use_ewc)
    rng = np.random.default_rng(seed)
    params = init_mlp(seed, hidden)
    projected = {name: {"kernel": name in PROJECTED and cfg.project} for name in params}
    state = pm.init_state(params, projected)
    ewc = _ewc_state(params)
    size = max(t.train_y.size for t in tasks)
    per_epoch = max(1, min(t.train_y.size for t in tasks) // batch_size)
    steps = len(tasks)
    acc = np.zeros((steps, steps))
    capacity: dict[str, list[float]] = {name: [] for name in params}
    basis_sizes: dict[str, list[int]] = {name: [] for name in PROJECTED if cfg.project}
    seen = np.zeros(NUM_CLASSES, bool)
    opt_state = None
    for t, task in enumerate(tasks):
        current = np.isin(np.arange(NUM_CLASSES), task.classes)
        seen_before = seen.copy()
        seen |= current
        active = jnp.asarray(current if cfg.ce_scope == "current" else seen)
        batches = _batches(task, batch_size, rng, active)
        mask = None
        if method.masked:
            state = pm.begin_task(state, _loss, params, batches, cfg)
            mask = _head_mask(state.mask, state.importance, current, seen_before, cfg.head_old) if t else state.mask
        # Only the columns holding vectors (rounded up to 64): the projection then costs in·k·out per step.
        bases = jax.tree.map(lambda b: None if b is None else truncate_basis(b, 64), state.bases,
                             is_leaf=lambda b: b is None) if cfg.project else None
        if opt_state is None or cfg.reset_opt_state_per_task:
            opt_state = opt.init(params)
        # The same number of steps for every task (one compiled scan): the smallest task's batches per epoch.
        order = np.concatenate([rng.permutation(task.train_y.size)[: per_epoch * batch_size] for _ in range(epochs)])
        data_x = np.zeros((size, INPUTS), np.float32)
        data_y = np.zeros(size, np.int32)
        data_x[: task.train_y.size], data_y[: task.train_y.size] = task.train_x, task.train_y
        params, opt_state, _ = train(params, opt_state, data_x, data_y, order.reshape(-1, batch_size), active,
                                     mask, bases, ewc if use_ewc else None)
        if cfg.eval_weights == "slow":
            params = pm.slow_params(opt_state)  # the next task continues from the consolidated weights
        if method.masked or cfg.project:
            acts = forward(params, jnp.asarray(task.train_x[: cfg.gpm_samples]))[1]
            acts_tree = {name: {"kernel": acts[name] if name in PROJECTED else None} for name in params}
            state = pm.end_task(state, _loss, params, batches, acts_tree, cfg)
        for name in params:
            capacity[name].append(float(jnp.mean(1.0 - state.importance[name]["kernel"])))
        for name in basis_sizes:
            basis_sizes[name].append(basis_size(state.bases[name]["kernel"]))
        if use_ewc:
            ewc = _ewc_update(ewc, params, batches, method.ewc_lambda)
        for j in range(t + 1):
            predicted = np.asarray(_predict(params, jnp.asarray(tasks[j].test_x), jnp.asarray(seen)))
            acc[t, j] = float(np.mean(predicted == tasks[j].test_y))
    metrics = cil_metrics(acc, counts=[t.test_y.size for t in tasks])
    return RunResult(acc, metrics, capacity if method.masked else {}, basis_sizes)


@jax.jit
def _per_sample_fisher(params: Any, x: jax.Array, y: jax.Array, active: jax.Array) -> Any:
    """Σ over the rows of x [B, 64] of the squared per-sample gradient (the empirical Fisher's numerator)."""
    def one(xi, yi):
        return jax.grad(_loss)(params, (xi[None], yi[None], active))

    return jax.tree.map(lambda g: jnp.sum(jnp.square(g), axis=0), jax.vmap(one)(x, y))


def _ewc_update(ewc: dict[str, Any], params: Any, batches: list, lam: float) -> dict[str, Any]:
    """Online EWC: the empirical Fisher (mean squared per-sample gradient over the task's batches) added to the
    running sum, the anchor moved to the new weights."""
    sums = [_per_sample_fisher(params, *batch) for batch in batches]
    rows = sum(batch[1].shape[0] for batch in batches)
    fisher = jax.tree.map(lambda *s: sum(s) / rows, *sums)
    return {"anchor": params, "fisher": jax.tree.map(jnp.add, ewc["fisher"], fisher), "lambda": jnp.float32(lam)}
