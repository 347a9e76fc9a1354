"""Pieces of the Adam loss-spike reproduction: the two toy problems, the per-step trace, the stage detector.

The trace runs Adam (β1 = 0, the setting the paper's stability analysis linearises) for a fixed number of steps
in one `lax.scan` and records, before each update, on a *fixed probe loss* (the spec's advice: mini-batch
Hessians are noisy):

- `loss`: the probe loss L(θ_t);
- `ratio`: Σ g_t² / Σ v_{t−1} for the training gradient g_t (decoupling when ≪ 1) and `small_grad_fraction`;
- `v_median`, `v_max`: the median and the largest coordinate of the second moment v_t;
- `sharpness`: η λ_max(P^{1/2} H P^{1/2}), P the preconditioner Adam applies at step t, H the probe Hessian,
  by power iteration warm-started from the previous step's eigenvector (at least λ_dir, itself a Rayleigh
  quotient of the same matrix);
- `directional`: η λ_dir with λ_dir = (Pg)ᵀH(Pg) / gᵀPg, g the probe gradient: the curvature of the
  preconditioned Hessian along the preconditioned gradient (the paper's "gradient-directional curvature";
  the normalisation is derived in the spec). The predictor fires when it exceeds 2.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from icml26zoo.optim import spike_monitor as sm

TRACE_KEYS = ("loss", "ratio", "small_grad_fraction", "v_median", "v_max", "sharpness", "directional",
              "grad_norm")
STAGE_NAMES = {1: "descent", 2: "v decays", 3: "lambda_max > 2/eta", 4: "spike", 5: "recovery"}


@dataclasses.dataclass(frozen=True)
class Problem:
    """A toy training problem: initial params, the fixed probe loss and the (noisy) training gradient."""

    name: str
    params: Any
    probe_loss: Callable[[Any], jax.Array]
    train_grad: Callable[[Any, jax.Array], Any]
    learning_rate: float


def diagonal_quadratic(*, dim: int, noise: float, learning_rate: float) -> Problem:
    """L(θ) = ½ Σ h_i θ_i², curvatures h geometric in [0.1, 1], θ_0 = 1; the training gradient is the exact one
    plus N(0, noise²) per coordinate (a mini-batch stand-in). The noise also keeps θ off float32's underflow:
    without it, the passage of η h/√v through 1 contracts θ to exactly 0 before v has decayed."""
    curvatures = jnp.asarray(np.geomspace(0.1, 1.0, dim), jnp.float32)
    probe = lambda p: 0.5 * jnp.sum(curvatures * p["theta"] ** 2)

    def train_grad(params, key):
        exact = jax.grad(probe)(params)
        return {"theta": exact["theta"] + noise * jax.random.normal(key, (dim,), jnp.float32)}

    return Problem("quadratic", {"theta": jnp.ones(dim, jnp.float32)}, probe, train_grad, learning_rate)


def mlp_regression(*, seed: int, batch_size: int, learning_rate: float, rows: int = 128, inputs: int = 4,
                   width: int = 16) -> Problem:
    """A tanh MLP (inputs → width → width → 1) fitting y = sin(wᵀx) on `rows` Gaussian points; training uses
    random mini-batches of `batch_size` rows, the probe loss is the mean squared error on all rows."""
    if batch_size > rows:
        raise ValueError(f"budget.batch_size (the MLP mini-batch) must be <= {rows} rows, got {batch_size}")
    data_key, teacher_key, init_key = jax.random.split(jax.random.PRNGKey(1000 + seed), 3)
    x = jax.random.normal(data_key, (rows, inputs), jnp.float32)
    y = jnp.sin(x @ jax.random.normal(teacher_key, (inputs,), jnp.float32))[:, None]
    sizes = (inputs, width, width, 1)
    params = [{"w": jax.random.normal(jax.random.fold_in(init_key, i), (a, b), jnp.float32) / np.sqrt(a),
               "b": jnp.zeros(b, jnp.float32)} for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True))]

    def mse(p, xs, ys):
        h = xs
        for layer in p[:-1]:
            h = jnp.tanh(h @ layer["w"] + layer["b"])
        return jnp.mean((h @ p[-1]["w"] + p[-1]["b"] - ys) ** 2)

    def train_grad(p, key):
        index = jax.random.choice(key, rows, (batch_size,), replace=False)
        return jax.grad(mse)(p, x[index], y[index])

    return Problem("mlp", params, lambda p: mse(p, x, y), train_grad, learning_rate)


def trace(problem: Problem, *, steps: int, b2: float, eps: float, power_iters: int, key: jax.Array,
          kappa: float = 0.1) -> dict[str, np.ndarray]:
    """Trains `problem` with Adam(β1 = 0, `b2`, `eps`) at its constant learning rate for `steps` steps; returns
    TRACE_KEYS -> float64 [steps], each measured before the update of that step (see the module docstring)."""
    eta = problem.learning_rate
    optimizer = optax.adam(eta, b1=0.0, b2=b2, eps=eps)
    probe = problem.probe_loss

    def step(carry, step_key):
        params, opt_state, top = carry
        grad_key, power_key = jax.random.split(step_key)
        grads = problem.train_grad(params, grad_key)
        loss, probe_grads = jax.value_and_grad(probe)(params)
        adam = sm.find_adam_state(opt_state)
        _, precond = sm.adam_direction(grads, adam, b1=0.0, b2=b2, eps=eps)
        direction = jax.tree.map(jnp.multiply, precond, probe_grads)
        curvature, slope = sm.directional_curvature(probe, params, probe_grads, direction)
        lam_dir = curvature / jnp.maximum(slope, jnp.finfo(jnp.float32).tiny)
        lam_max, top = sm.preconditioned_sharpness(probe, params, precond, key=power_key, num_iters=power_iters,
                                                   init=top)
        stats = sm.decoupling_stats(grads, adam, b2=b2, kappa=kappa)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        nu = jnp.concatenate([v.reshape(-1) for v in jax.tree.leaves(sm.find_adam_state(opt_state).nu)])
        record = {
            "loss": loss, "ratio": stats["decoupling_ratio"], "small_grad_fraction": stats["small_grad_fraction"],
            "v_median": jnp.median(nu), "v_max": jnp.max(nu),
            # Every Rayleigh quotient bounds λ_max from below; a few warm-started iterations can lag λ_dir's.
            "sharpness": eta * jnp.maximum(lam_max, lam_dir), "directional": eta * lam_dir,
            "grad_norm": jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree.leaves(probe_grads))),
        }
        return (optax.apply_updates(params, updates), opt_state, top), record

    top = jax.tree.map(lambda p: jnp.ones_like(p, jnp.float32), problem.params)
    init = (problem.params, optimizer.init(problem.params), top)
    # optax's Adam mixes Python floats and int32 counts (not strict-promotion clean).
    with jax.numpy_dtype_promotion("standard"):
        _, records = jax.jit(lambda c, ks: jax.lax.scan(step, c, ks))(init, jax.random.split(key, steps))
    return {name: np.asarray(records[name], np.float64) for name in TRACE_KEYS}


@dataclasses.dataclass(frozen=True)
class Episode:
    """One loss spike: the predictor's first step (`predicted`, None if it was not firing at the onset), the
    first step of the sustained η λ_max > 2 run before it (`warned`), the `onset` (loss > factor × baseline),
    the `peak` and the end of the recovery (`recovered`, exclusive; the run's length if never)."""

    predicted: int | None
    warned: int | None
    onset: int
    peak: int
    recovered: int


def _run_start(flags: np.ndarray, end: int) -> int | None:
    """First index of the run of True in `flags` that ends at `end` (inclusive); None if flags[end] is False."""
    if not flags[end]:
        return None
    start = end
    while start > 0 and flags[start - 1]:
        start -= 1
    return start


def detect_stages(loss: np.ndarray, ratio: np.ndarray, sharpness: np.ndarray, directional: np.ndarray, *,
                  kappa: float = 0.1, spike_factor: float = 100.0, window: int = 50,
                  recover_fraction: float = 0.1) -> tuple[np.ndarray, list[Episode]]:
    """Labels every step with a stage 1..5 (`STAGE_NAMES`) and lists the spike episodes.

    Args (all [T] float arrays): loss; ratio = Σg²/Σv_{t−1}; sharpness = η λ_max; directional = η λ_dir.
    A spike's onset is a step outside any episode whose loss exceeds `spike_factor` × the median loss of the
    `window` steps before it; its peak is the largest loss before the recovery, which ends at the first step
    after the peak whose loss is below `recover_fraction` × peak. Stage 4 runs from the start of the
    uninterrupted η λ_dir > 2 run that reaches the onset (from the onset if the predictor is silent there)
    to the peak, stage 5 from after the peak to the recovery. Elsewhere: 3 if η λ_max > 2, else 2 if
    ratio < `kappa` (v no longer tracks g²), else 1.
    """
    arrays = [np.asarray(a, np.float64) for a in (loss, ratio, sharpness, directional)]
    if any(a.ndim != 1 or a.shape != arrays[0].shape for a in arrays) or arrays[0].size == 0:
        raise ValueError(f"loss, ratio, sharpness and directional must be non-empty 1-D arrays of one length, got "
                         f"shapes {[a.shape for a in arrays]}")
    loss, ratio, sharpness, directional = arrays
    if not np.all(np.isfinite(loss)):
        raise ValueError("loss must be finite at every step (a diverged run has no stages)")
    if not spike_factor > 1 or not 0 < recover_fraction < 1 or not kappa > 0 or window < 1:
        raise ValueError(f"need spike_factor > 1, 0 < recover_fraction < 1, kappa > 0, window >= 1; got "
                         f"{spike_factor!r}, {recover_fraction!r}, {kappa!r}, {window!r}")
    size = loss.size
    stages = np.where(sharpness > 2, 3, np.where(ratio < kappa, 2, 1))
    episodes, t = [], window
    while t < size:
        if loss[t] <= spike_factor * np.median(loss[t - window:t]):
            t += 1
            continue
        onset, peak, end = t, t, t + 1
        while end < size and loss[end] >= recover_fraction * loss[peak]:
            peak = end if loss[end] > loss[peak] else peak
            end += 1
        predicted = _run_start(directional > 2, onset)
        warn_end = onset if predicted is None else predicted
        warned = _run_start(sharpness > 2, warn_end)
        stages[onset if predicted is None else predicted:peak + 1] = 4
        stages[peak + 1:end] = 5
        episodes.append(Episode(predicted, warned, onset, peak, end))
        t = end + window
    return stages, episodes
