"""The PUMA reproduction's training loop: one jitted step per method, the pool carried between steps, evaluation.

Both methods share everything but the forward process: the model (a bidirectional circulation-attention LM at
α = β = 1, i.e. plain softmax attention without a causal mask), AdamW with warmup + cosine decay and gradient
clipping at 1 (the reference's Sudoku recipe), the data order, the 1/n-weighted masked loss and the evaluation.
"random": the MDLM baseline (`losses.masked_diffusion.random_masking` on each fresh batch). "puma": the stateful
pool of `losses.progressive_unmasking` (B rows; the host keeps a buffer of fresh rows and drops the ones each
update used). Each row is a window of seq_len bytes of the stdlib corpus (the loader's rows are full).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from icml26zoo.losses.masked_diffusion import denoiser_logits, masked_loss_sums, random_masking
from icml26zoo.losses.masked_sampler import sample
from icml26zoo.losses.progressive_unmasking import Pool, init_pool, update_pool
from icml26zoo.models import ModelConfig, build_model
from icml26zoo.train.config import DataConfig
from icml26zoo.train.data import make_eval_iterator, make_train_iterator

METHODS = ("random", "puma")
BYTE_VOCAB = 256
MASK_TOKEN = BYTE_VOCAB  # the model's vocabulary is 257: bytes 0..255 and [MASK] = 256


@dataclasses.dataclass(frozen=True)
class Setup:
    """One training run's settings besides the budget (steps, batch, seq_len, seed)."""

    d_model: int = 64
    num_layers: int = 2
    learning_rate: float = 3e-3
    num_phases: int = 8
    mode: str = "standard"
    eval_every: int = 50
    eval_rows: int = 32
    eval_mask_draws: int = 4
    sampler_steps: int = 16


def model_config(setup: Setup, seq_len: int) -> ModelConfig:
    return ModelConfig(name="llama", mixer="circulation", mixer_options=(("causal", False),),
                       vocab_size=BYTE_VOCAB + 1, d_model=setup.d_model, num_layers=setup.num_layers,
                       num_heads=4, num_kv_heads=2, max_seq_len=seq_len)


def optimizer(setup: Setup, steps: int) -> optax.GradientTransformation:
    """AdamW (weight decay 0.01) with 10% linear warmup, cosine decay to 10%, global-norm clipping at 1."""
    schedule = optax.warmup_cosine_decay_schedule(0.0, setup.learning_rate, max(1, steps // 10), steps,
                                                  end_value=setup.learning_rate / 10)
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=0.01))


def _loss(graphdef, params, x0, xt, maskable):
    model = nnx.merge(graphdef, params)
    logits = denoiser_logits(model, xt, maskable.astype(jnp.int32), None)
    sums = masked_loss_sums(logits, x0, xt, maskable, MASK_TOKEN)
    return sums.loss_sum / jnp.maximum(sums.weight, 1.0), jax.nn.log_softmax(logits, axis=-1)


def make_steps(graphdef: nnx.GraphDef, tx: optax.GradientTransformation, setup: Setup
               ) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(random_step, puma_step), both jitted.

    random_step(params, opt, x0, maskable, key) -> (params, opt, loss);
    puma_step(params, opt, pool, fresh_x0, fresh_maskable, key) -> (params, opt, pool, loss, used).
    """
    grad_fn = jax.value_and_grad(lambda p, x0, xt, m: _loss(graphdef, p, x0, xt, m), has_aux=True)

    def apply(params, opt_state, grads):
        # optax mixes Python floats with int32 step counts, which strict dtype promotion (the tests') rejects.
        with jax.numpy_dtype_promotion("standard"):
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state

    @jax.jit
    def random_step(params, opt_state, x0, maskable, key):
        xt = random_masking(key, x0, maskable, MASK_TOKEN)
        (loss, _), grads = grad_fn(params, x0, xt, maskable)
        return *apply(params, opt_state, grads), loss

    @jax.jit
    def puma_step(params, opt_state, pool, fresh_x0, fresh_maskable, key):
        (loss, log_probs), grads = grad_fn(params, pool.x0, pool.xt, pool.maskable)
        pool, _, used = update_pool(key, pool, log_probs, fresh_x0, fresh_maskable, num_phases=setup.num_phases,
                                    mask_token=MASK_TOKEN, mode=setup.mode)
        return *apply(params, opt_state, grads), pool, loss, used

    return random_step, puma_step


def eval_rows(rows: int, seq_len: int) -> np.ndarray:
    """The first `rows` windows [rows, seq_len] of the corpus's eval split (stored order)."""
    iterator = make_eval_iterator(DataConfig(name="pystdlib"), batch_size=rows, seq_len=seq_len, max_batches=1)
    return np.asarray(next(iterator)["inputs"], np.int32)


def make_evaluator(graphdef: nnx.GraphDef, setup: Setup, x0: np.ndarray) -> Callable[[Any], dict[str, float]]:
    """evaluate(params) -> {"bpb": negative ELBO in bits per byte under random masking (mean over fixed mask
    draws), "infill_accuracy": greedy sampler's byte accuracy on the second half given the first}."""
    x0 = jnp.asarray(x0)
    maskable = jnp.ones(x0.shape, jnp.bool_)
    keys = jax.random.split(jax.random.key(12345), setup.eval_mask_draws)

    @jax.jit
    def elbo(params):
        def one(key):
            xt = random_masking(key, x0, maskable, MASK_TOKEN)
            return _loss(graphdef, params, x0, xt, maskable)[0]
        return jnp.mean(jax.lax.map(one, keys))

    prompt_mask = jnp.broadcast_to(jnp.arange(x0.shape[1]) < x0.shape[1] // 2, x0.shape)

    def evaluate(params) -> dict[str, float]:
        model = nnx.merge(graphdef, params)
        filled = sample(model, x0, prompt_mask, num_steps=setup.sampler_steps, rng=jax.random.key(0))
        accuracy = jnp.sum((filled == x0) & ~prompt_mask) / jnp.sum(~prompt_mask)
        return {"bpb": float(elbo(params)) / math.log(2), "infill_accuracy": float(accuracy)}

    return evaluate


class FreshRows:
    """The host's buffer of fresh training rows: `peek()` the next B, `drop(n)` the ones an update consumed."""

    def __init__(self, batch_size: int, seq_len: int, seed: int) -> None:
        self._iterator = make_train_iterator(DataConfig(name="pystdlib"), batch_size=batch_size, seq_len=seq_len,
                                             seed=seed)
        self.batch_size = batch_size
        self._buffer = np.zeros((0, seq_len), np.int32)
        self.consumed = 0

    def peek(self) -> np.ndarray:
        while self._buffer.shape[0] < self.batch_size:
            rows = np.asarray(next(self._iterator)["inputs"], np.int32)
            self._buffer = np.concatenate([self._buffer, rows])
        return self._buffer[: self.batch_size]

    def drop(self, count: int) -> None:
        self._buffer = self._buffer[count:]
        self.consumed += count


def train_method(method: str, setup: Setup, *, steps: int, batch_size: int, seq_len: int, seed: int,
                 eval_x0: np.ndarray) -> dict:
    """Trains one cell; returns its curve {"step", "bpb", "infill_accuracy", "train_loss", "fresh_rows"} + time."""
    model = build_model(model_config(setup, seq_len), rngs=nnx.Rngs(seed))
    graphdef, params = nnx.split(model, nnx.Param)
    tx = optimizer(setup, steps)
    opt_state = tx.init(params)
    random_step, puma_step = make_steps(graphdef, tx, setup)
    evaluate = make_evaluator(graphdef, setup, eval_x0)
    rows = FreshRows(batch_size, seq_len, seed)
    key = jax.random.key(seed + 7919)
    maskable = jnp.ones((batch_size, seq_len), jnp.bool_)
    pool: Pool | None = None
    if method == "puma":
        pool = jax.jit(init_pool, static_argnames=("num_phases", "mask_token"))(
            jax.random.fold_in(key, 0), jnp.asarray(rows.peek()), maskable, num_phases=setup.num_phases,
            mask_token=MASK_TOKEN)
        rows.drop(batch_size)
    curve = {name: [] for name in ("step", "bpb", "infill_accuracy", "train_loss", "fresh_rows")}
    losses, start = [], time.perf_counter()
    for step in range(1, steps + 1):
        step_key = jax.random.fold_in(key, step)
        if method == "random":
            params, opt_state, loss = random_step(params, opt_state, jnp.asarray(rows.peek()), maskable, step_key)
            rows.drop(batch_size)
        else:
            params, opt_state, pool, loss, used = puma_step(params, opt_state, pool, jnp.asarray(rows.peek()),
                                                            maskable, step_key)
            rows.drop(int(used))
        losses.append(float(loss))
        if step % setup.eval_every == 0 or step == steps:
            metrics = evaluate(params)
            for name, value in (("step", step), ("train_loss", float(np.mean(losses))),
                                ("fresh_rows", rows.consumed), *metrics.items()):
                curve[name].append(value)
            losses = []
    return {"curve": curve, "seconds": time.perf_counter() - start}
