"""The Adam loss-spike monitor (Bai et al., arXiv 2506.04805) as a train-loop hook.

Every `spike_monitor_every` steps, before the optimizer update, the loop runs `spike_metrics(state,
batch)`: it recomputes the gradient of the step about to be taken and reads the optimizer's Adam moments
to log second-moment decoupling, the directional curvature along Adam's update and the preconditioned
sharpness (`zoo.optim.spike_monitor`). `spike/spike_predicted = 1` flags a step whose quadratic model
predicts a loss increase (η λ_dir > 2); flagged steps are marked on the end-of-run loss plot. The
direction is Adam's unclipped one: global-norm clipping rescales the gradient, not Adam's direction
once the second moment dominates, so the prediction holds for clipped runs to first order.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
from flax import nnx

from icml26zoo.losses import Objective
from icml26zoo.optim.spike_monitor import spike_diagnostics
from icml26zoo.train.config import OptimConfig
from icml26zoo.train.step import TrainState, objective_loss, step_keys

PREFIX = "spike/"


def make_spike_monitor(
    graphdef: nnx.GraphDef, objective: Objective, schedule: Callable, optim: OptimConfig, power_iters: int = 10
) -> Callable[[TrainState, dict], dict[str, jax.Array]]:
    """Returns a pure `spike_metrics(state, batch) -> {"spike/<name>": scalar}` for jit.

    The loss is the run's objective with the key the train step will use, so the monitored gradient is
    exactly the one of the step about to be taken.
    """

    def spike_metrics(state: TrainState, batch: dict) -> dict[str, jax.Array]:
        batch_loss = objective_loss(graphdef, objective, step_keys(state)[0], state.variables, state.step)
        loss = lambda params: batch_loss(params, batch)
        grads = jax.grad(loss)(state.params)
        # The Adam bias corrections inside mix Python floats with int32 counts (see train.step).
        with jax.numpy_dtype_promotion("standard"):
            metrics = spike_diagnostics(
                loss, state.params, grads, state.opt_state,
                learning_rate=schedule(state.step // optim.grad_accum_steps),
                b1=optim.b1, b2=optim.b2, eps=optim.eps,
                key=jax.random.wrap_key_data(state.rng), num_power_iters=power_iters,
            )
        return {PREFIX + name: value for name, value in metrics.items()}

    return spike_metrics


def flagged_steps(records: list[dict]) -> list[int]:
    """Steps whose monitor record predicted a spike, for plot markers."""
    return [r["step"] for r in records if r.get(PREFIX + "spike_predicted", 0) >= 0.5]
