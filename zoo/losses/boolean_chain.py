"""Objective `boolean_chain`: SFT with or without teacher forcing, or policy-gradient RL with process rewards,
on the k-sparse Boolean chains of RL vs SFT for sparse Boolean functions (Lyu, Jia, Cai, Zhu, arXiv 2511.17852; dataset
`sparse_boolean`). Selected by `objective_options`, e.g. `objective_options=(("mode", "rl"),)`:

  teacher_forcing  Σ_j CE(p_θ(· | x, z_<j), z_j): the context holds the true chain (objective "lm" on the bits)
  free_running     Σ_j CE(p_θ(· | x, ẑ_<j), z_j): SFT without teacher forcing; the context holds the
                   model's own rollout ẑ (greedy or sampled, stop-gradient), the targets stay the true z
  rl               REINFORCE with per-step rewards: ẑ_j ~ π_θ(· | x, ẑ_<j),
                   loss = -Σ_j w_j (r_j - b_j) log π_θ(ẑ_j | x, ẑ_<j) / Σ w, r from a verifier
                   (`boolean_chain_verifier`: process or outcome), b_j the batch mean per step (or 0);
                   the gradient flows through the log-probabilities only

p_θ and π_θ are distributions over the two bit tokens only (the spec's readout "to the two-token
vocabulary"): the model's logits of every other token (padding) are masked out in every mode, so a rollout
never writes a non-bit into the chain and log π_θ is that of the bit actually sampled, normalized over the
two bits. Every loss is normalized by the number of chain steps Σ w. The chain steps are the targets with weight > 0
(the dataset weights the chain tokens only); a rollout replaces the input after each chain step by the
model's token, one full forward per position from the first chain step on (the rows are a few dozen tokens).

Metrics, in every mode, measure the chain the model writes itself: a greedy free-running rollout's
cross-entropy against the true chain (loss_sum) and its step accuracy (correct), over the chain steps (weight),
and the accuracy of its final answer f(x) per example (answer_accuracy_sum / answer_accuracy_weight). So
eval/accuracy is free-running step accuracy and eval/answer_accuracy free-running answer accuracy, whatever
the training mode.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Literal

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.losses.batch_fields import TOKEN_FIELDS, require_batch_fields
from icml26zoo.losses.boolean_chain_verifier import (
    BIT_TOKENS,
    batch_mean_baseline,
    final_steps,
    outcome_rewards,
    process_rewards,
)
from icml26zoo.losses.cross_entropy import weighted_cross_entropy, weighted_mean
from icml26zoo.registry import register_objective

Batch = dict[str, jax.Array]
# choose(logits [B, V], key) -> tokens [B] int32
Chooser = Callable[[jax.Array, jax.Array], jax.Array]
# Logit of the tokens outside the chain's alphabet: finite, so masked tokens get probability 0 and no NaN.
MASKED_LOGIT = -1e9


@dataclasses.dataclass(frozen=True)
class BooleanChainOptions:
    """Options of objective `boolean_chain` (`TrainConfig.objective_options`)."""

    # "teacher_forcing", "free_running" (SFT without teacher forcing) or "rl" (REINFORCE, per-step rewards).
    mode: Literal["teacher_forcing", "free_running", "rl"] = "free_running"
    # free_running: the context is the model's greedy (argmax) or sampled rollout.
    rollout: Literal["greedy", "sample"] = "greedy"
    # rl: "process" (r_j = 1[ẑ_j = z_j]) or "outcome" (the final answer's reward credited to every step).
    reward: Literal["process", "outcome"] = "process"
    # rl: "batch_mean" (b_j = the batch's mean reward at step j) or "none" (b = 0).
    baseline: Literal["batch_mean", "none"] = "batch_mean"


def greedy(logits: jax.Array, key: jax.Array) -> jax.Array:
    del key  # Deterministic.
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)


def sample(logits: jax.Array, key: jax.Array) -> jax.Array:
    return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)


def bit_logits(logits: jax.Array) -> jax.Array:
    """logits [..., V] with every token but the two bits set to MASKED_LOGIT: the chain's policy."""
    is_bit = (jnp.arange(logits.shape[-1]) >= BIT_TOKENS[0]) & (jnp.arange(logits.shape[-1]) <= BIT_TOKENS[1])
    return jnp.where(is_bit, logits, MASKED_LOGIT)


def _logits(model: nnx.Module, inputs: jax.Array, batch: Batch) -> jax.Array:
    """[B, T, V] float32 logits of the policy over the bit tokens (module doc)."""
    logits = model(inputs, segment_ids=batch["segment_ids"], positions=batch["positions"])
    return bit_logits(logits.astype(jnp.float32))


def rollout(model: nnx.Module, batch: Batch, choose: Chooser, key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The model writes its own chain: (inputs [B, T], choices [B, T]) int32.

    choices[:, t] is choose(logits at t) under the returned inputs; after each chain step t the input at
    t + 1 (the same example's next token) is replaced by that choice. Because attention is causal, the
    logits a full forward over the returned inputs gives at t are the ones the choice was drawn from.
    Nothing here is differentiated: the parameters enter through stop_gradient.
    """
    graphdef, state = nnx.split(model)
    state = jax.lax.stop_gradient(state)
    inputs, weights, segments = batch["inputs"], batch["weights"], batch["segment_ids"]
    length = inputs.shape[1]
    same_next = jnp.pad(segments[:, 1:] == segments[:, :-1], ((0, 0), (0, 1)))
    feeds = (weights > 0) & same_next
    first_step = jnp.argmax(jnp.any(weights > 0, axis=0)).astype(jnp.int32)

    def step(t: jax.Array, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        context, choices = carry
        logits = _logits(nnx.merge(graphdef, state), context, batch)
        choice = choose(jax.lax.dynamic_index_in_dim(logits, t, axis=1, keepdims=False), jax.random.fold_in(key, t))
        choices = jax.lax.dynamic_update_index_in_dim(choices, choice, t, axis=1)
        after = jnp.minimum(t + 1, length - 1)
        feed = jax.lax.dynamic_index_in_dim(feeds, t, axis=1, keepdims=False)
        current = jax.lax.dynamic_index_in_dim(context, after, axis=1, keepdims=False)
        context = jax.lax.dynamic_update_index_in_dim(context, jnp.where(feed, choice, current), after, axis=1)
        return context, choices

    carry = (inputs, jnp.zeros_like(inputs))
    return jax.lax.fori_loop(first_step, length, step, carry)


def _cross_entropy_sums(model: nnx.Module, batch: Batch, context: jax.Array):
    return weighted_cross_entropy(_logits(model, context, batch), batch["targets"], batch["weights"])


def free_running_metrics(model: nnx.Module, batch: Batch) -> dict[str, jax.Array]:
    """Summable metrics of a greedy free-running rollout: loss_sum, weight, correct (see the module doc), and
    answer_accuracy_sum / answer_accuracy_weight: examples whose last chain step, f(x), is right / examples."""
    context, choices = rollout(model, batch, greedy, jax.random.key(0))
    sums = _cross_entropy_sums(model, batch, context)
    answers = final_steps(batch["weights"], batch["segment_ids"])
    solved = jnp.sum(answers & (choices == batch["targets"])).astype(jnp.float32)
    return {"loss_sum": sums.loss_sum, "weight": sums.weight, "correct": sums.correct,
            "answer_accuracy_sum": solved, "answer_accuracy_weight": jnp.sum(answers).astype(jnp.float32)}


def step_correct(model: nnx.Module, batch: Batch) -> jax.Array:
    """[B, T] bool: whether each greedy free-running chain step is right (False off the chain)."""
    _, choices = rollout(model, batch, greedy, jax.random.key(0))
    return (choices == batch["targets"]) & (batch["weights"] > 0)


def sft_loss(model: nnx.Module, batch: Batch, context: jax.Array) -> jax.Array:
    """Mean cross-entropy of the true chain tokens given `context` [B, T] as the inputs."""
    return weighted_mean(_cross_entropy_sums(model, batch, context))


def rl_loss(
    model: nnx.Module, batch: Batch, key: jax.Array, options: BooleanChainOptions
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The REINFORCE surrogate -Σ w (r - b) log π(ẑ) / Σ w on a sampled chain, and its terms
    (choices, rewards, advantages [B, T]) for inspection."""
    weights = batch["weights"]
    context, choices = rollout(model, batch, sample, key)
    log_probs = jax.nn.log_softmax(_logits(model, context, batch), axis=-1)
    chosen = jnp.take_along_axis(log_probs, choices[..., None], axis=-1)[..., 0]
    if options.reward == "process":
        rewards = process_rewards(choices, batch["targets"], weights)
    else:
        rewards = outcome_rewards(choices, batch["targets"], weights, batch["segment_ids"])
    baseline = batch_mean_baseline(rewards, weights) if options.baseline == "batch_mean" else 0.0
    advantages = jax.lax.stop_gradient(rewards - baseline)
    loss = -jnp.sum(weights * advantages * chosen) / jnp.maximum(jnp.sum(weights), 1.0)
    return loss, {"choices": choices, "rewards": rewards, "advantages": advantages}


@register_objective("boolean_chain")
def boolean_chain_objective(
    model: nnx.Module, batch: Batch, rng: jax.Array, *, options: BooleanChainOptions = BooleanChainOptions()
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The chain objective of `options.mode` (module doc); metrics of a greedy free-running rollout."""
    require_batch_fields("boolean_chain", batch, TOKEN_FIELDS, dataset="sparse_boolean")
    if options.mode == "teacher_forcing":
        loss = sft_loss(model, batch, batch["inputs"])
    elif options.mode == "free_running":
        choose = greedy if options.rollout == "greedy" else sample
        context, _ = rollout(model, batch, choose, rng)
        loss = sft_loss(model, batch, context)
    else:
        loss, _ = rl_loss(model, batch, rng, options)
    return loss, free_running_metrics(model, batch)


boolean_chain_objective.options_class = BooleanChainOptions
