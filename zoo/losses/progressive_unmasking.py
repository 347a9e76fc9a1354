"""PUMA's progressive unmasking: the forward process that trains on the masks a confidence-ordered sampler makes.

Paper: Kim, Geuter, Alvarez-Melis, Kakade, Chen, "Stop Training for the Worst: Progressive Unmasking Accelerates
Masked Diffusion Training" (ICML 2026, arXiv 2602.10314); maths read from the authors' `progressive.py`
(PhasedMasking). See docs/papers/puma.md.

A pool of B sequences carries, per row, clean x0, the current x_t and a phase j ∈ {0, …, K−1}; phase j means an
unmasked fraction in [j/K, (j+1)/K). Each training step computes the 1/n-weighted masked loss on x_t
(`masked_diffusion.masked_loss_sums`), then — with that same forward pass's log-probabilities, no gradient —
moves every row to phase j' = (j+1) mod K by revealing the ground-truth tokens at its most confident masked
positions (confidence = max_v log p_θ(v | x_t)) until it reaches a fresh target count for j'. Rows whose phase
wraps to 0 are replaced by fresh sequences at phase 0 (a uniformly random reveal). Target count for phase j:
ratio ~ U[j/K, (j+1)/K), u = min(round(ratio · L_eff), max(L_eff − 1, 1)), so one token always stays masked.
Mode "confidence_collapse" additionally reveals every masked position whose max probability exceeds
`threshold`, and then sets the phase from the actual unmasked ratio.

Two forms:
- `init_pool` / `update_pool`: the reference's stateful pool, pure jitted functions of fixed-shape arrays
  (the reproduction's own loop carries the pool between steps; the host supplies B fresh rows per step and
  the update reports how many it used).
- objective "puma" (the trainer's objective is stateless: objective(model, batch, rng) with a fresh key and no
  step count): a reconstruction. Each fresh row draws a phase j ~ U{0..K−1}, starts from the phase-0 random
  reveal and is advanced j times by the *current* model's confidence order (j extra forward passes, no
  gradient), then trained on. Same masks' law as the pool except that the reveals use today's parameters
  instead of those of the steps when the pool made them, and it costs up to K − 1 extra forward passes.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.losses.batch_fields import MASKED_FIELDS, require_batch_fields
from icml26zoo.losses.masked_diffusion import (
    Batch,
    batch_sequences,
    check_ratio,
    denoiser_logits,
    mask_id,
    masked_loss_sums,
    result,
    reveal_ranked,
)
from icml26zoo.registry import register_objective
from icml26zoo.validation import check_choice, check_int

MODES = ("standard", "confidence_collapse")
# The trainer-form objective's number of phases (the trainer passes no objective options).
TRAINER_PHASES = 4


class Pool(NamedTuple):
    """The PUMA pool: B rows of T tokens. x0, xt [B, T] int32; maskable [B, T] bool; phase [B] int32."""

    x0: jax.Array
    xt: jax.Array
    maskable: jax.Array
    phase: jax.Array


def check_settings(num_phases: int, mode: str = "standard", threshold: float = 0.9) -> None:
    """ValueError naming the argument for K < 1, an unknown mode or a threshold outside [0, 1]."""
    check_int("num_phases", num_phases)  # K, the number of phases
    check_choice("mode", mode, MODES)
    check_ratio("threshold", threshold)


def target_counts(rng: jax.Array, phase: jax.Array, num_phases: int, l_eff: jax.Array) -> jax.Array:
    """Unmasked-token targets [B] int32 for phases [B]: min(round(U[j/K, (j+1)/K) · L_eff), max(L_eff − 1, 1))."""
    ratio = (phase.astype(jnp.float32) + jax.random.uniform(rng, phase.shape)) / num_phases
    return target_from_ratio(ratio, l_eff)


def target_from_ratio(ratio: jax.Array, l_eff: jax.Array) -> jax.Array:
    """min(round(ratio · L_eff), max(L_eff − 1, 1)) for ratio [B] in [0, 1] (ValueError otherwise), L_eff [B]."""
    check_ratio("ratio", ratio)
    cap = jnp.maximum(l_eff - 1, 1)
    return jnp.minimum(jnp.round(ratio * l_eff.astype(jnp.float32)).astype(jnp.int32), cap)


def fresh_state(rng: jax.Array, x0: jax.Array, maskable: jax.Array, phase: jax.Array, num_phases: int,
                mask_token: int) -> jax.Array:
    """x_t [B, T] of fresh rows at `phase` [B]: a target count of maskable positions revealed uniformly at random."""
    target_key, position_key = jax.random.split(rng)
    l_eff = jnp.sum(maskable, axis=1)
    revealed = reveal_ranked(jnp.zeros(x0.shape), maskable, target_counts(target_key, phase, num_phases, l_eff),
                             position_key)
    return jnp.where(maskable & ~revealed, mask_token, x0)


def init_pool(rng: jax.Array, x0: jax.Array, maskable: jax.Array, *, num_phases: int, mask_token: int) -> Pool:
    """A pool of the B rows x0 [B, T] (maskable [B, T] bool), phases 0..K−1 repeated over the batch and shuffled."""
    check_settings(num_phases)
    phase_key, state_key = jax.random.split(rng)
    phase = jax.random.permutation(phase_key, jnp.arange(x0.shape[0], dtype=jnp.int32) % num_phases)
    return Pool(x0, fresh_state(state_key, x0, maskable, phase, num_phases, mask_token), maskable, phase)


def advance(rng: jax.Array, xt: jax.Array, x0: jax.Array, maskable: jax.Array, log_probs: jax.Array,
            next_phase: jax.Array, num_phases: int, mask_token: int) -> jax.Array:
    """x_t with ground-truth tokens revealed at the most confident masked positions up to next_phase's target.

    log_probs [B, T, V] are the model's on x_t; confidence = max_v log p. Rows already at or past the target
    are unchanged.
    """
    target_key, tie_key = jax.random.split(rng)
    masked = maskable & (xt == mask_token)
    l_eff = jnp.sum(maskable, axis=1)
    unmasked = l_eff - jnp.sum(masked, axis=1)
    to_reveal = jnp.maximum(target_counts(target_key, next_phase, num_phases, l_eff) - unmasked, 0)
    confidence = jnp.max(log_probs, axis=-1)
    return jnp.where(reveal_ranked(confidence, masked, to_reveal, tie_key), x0, xt)


def collapse(xt: jax.Array, x0: jax.Array, maskable: jax.Array, log_probs: jax.Array, threshold: float,
             num_phases: int, mask_token: int) -> tuple[jax.Array, jax.Array]:
    """confidence_collapse: reveal every masked position with max prob > threshold; (x_t, phase from the ratio)."""
    masked = maskable & (xt == mask_token)
    xt = jnp.where(masked & (jnp.max(log_probs, axis=-1) > jnp.log(threshold)), x0, xt)
    l_eff = jnp.maximum(jnp.sum(maskable, axis=1), 1)
    ratio = 1.0 - jnp.sum(maskable & (xt == mask_token), axis=1).astype(jnp.float32) / l_eff.astype(jnp.float32)
    phase = jnp.minimum(jnp.floor(ratio * num_phases).astype(jnp.int32), num_phases - 1)
    return xt, phase


def refill(pool: Pool, replace: jax.Array, fresh_x0: jax.Array, fresh_maskable: jax.Array, rng: jax.Array,
           num_phases: int, mask_token: int) -> tuple[Pool, jax.Array]:
    """Rows flagged in replace [B] take the next rows of the fresh buffer [B, T] (in order) at phase 0.

    Returns (pool, used): used = replace.sum(), how many fresh rows the host must drop from its buffer.
    """
    source = jnp.clip(jnp.cumsum(replace) - 1, 0, fresh_x0.shape[0] - 1)
    new_x0, new_maskable = fresh_x0[source], fresh_maskable[source]
    zero = jnp.zeros_like(pool.phase)
    new_xt = fresh_state(rng, new_x0, new_maskable, zero, num_phases, mask_token)
    keep = ~replace[:, None]
    pool = Pool(jnp.where(keep, pool.x0, new_x0), jnp.where(keep, pool.xt, new_xt),
                jnp.where(keep, pool.maskable, new_maskable), jnp.where(replace, zero, pool.phase))
    return pool, jnp.sum(replace.astype(jnp.int32))


def update_pool(rng: jax.Array, pool: Pool, log_probs: jax.Array, fresh_x0: jax.Array, fresh_maskable: jax.Array,
                *, num_phases: int, mask_token: int, mode: str = "standard", threshold: float = 0.9
                ) -> tuple[Pool, jax.Array, jax.Array]:
    """One PUMA pool update after a training step: (new pool, replace [B] bool, fresh rows used).

    log_probs [B, T, V]: the training forward pass's log-probabilities on pool.xt (stop-gradient applied here).
    fresh_x0 [B, T], fresh_maskable [B, T]: the host's buffer of fresh sequences, consumed in order.
    """
    check_settings(num_phases, mode, threshold)
    log_probs = jax.lax.stop_gradient(log_probs)
    advance_key, refill_key = jax.random.split(rng)
    next_phase = (pool.phase + 1) % num_phases
    replace = next_phase == 0
    xt = advance(advance_key, pool.xt, pool.x0, pool.maskable, log_probs, next_phase, num_phases, mask_token)
    if mode == "confidence_collapse":
        xt, next_phase = collapse(xt, pool.x0, pool.maskable, log_probs, threshold, num_phases, mask_token)
    xt = jnp.where(replace[:, None], pool.xt, xt)
    pool, used = refill(Pool(pool.x0, xt, pool.maskable, next_phase), replace, fresh_x0, fresh_maskable,
                        refill_key, num_phases, mask_token)
    return pool, replace, used


def replayed_state(model: nnx.Module, rng: jax.Array, x0: jax.Array, maskable: jax.Array, batch: Batch,
                   num_phases: int) -> jax.Array:
    """The trainer form's x_t [B, T]: phase j ~ U{0..K−1} per row, reached from a phase-0 random reveal by j
    confidence-ordered advances under the current model (no gradient)."""
    token = mask_id(model)
    phase_key, start_key, loop_key = jax.random.split(rng, 3)
    target_phase = jax.random.randint(phase_key, (x0.shape[0],), 0, num_phases)
    xt = fresh_state(start_key, x0, maskable, jnp.zeros_like(target_phase), num_phases, token)

    def step(phase: int, xt: jax.Array) -> jax.Array:
        logits = denoiser_logits(model, xt, batch["segment_ids"], batch["positions"])
        log_probs = jax.lax.stop_gradient(jax.nn.log_softmax(logits, axis=-1))
        key = jax.random.fold_in(loop_key, phase)
        advanced = advance(key, xt, x0, maskable, log_probs, jnp.full_like(target_phase, phase + 1), num_phases,
                           token)
        return jnp.where((phase < target_phase)[:, None], advanced, xt)

    for phase in range(num_phases - 1):
        xt = step(phase, xt)
    return jax.lax.stop_gradient(xt)


@register_objective("puma")
def puma_objective(model: nnx.Module, batch: Batch, rng: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """PUMA, stateless reconstruction for the trainer (K = TRAINER_PHASES, standard mode; module docstring).

    Same 1/n-weighted masked loss as "mdlm" on progressively unmasked x_t. Its eval/loss is on PUMA's masks,
    not random ones: compare runs with the "mdlm" objective's evaluation (the reproduction does).
    """
    require_batch_fields("puma", batch, MASKED_FIELDS, dataset="pystdlib")
    x0, maskable, collision = batch_sequences(model, batch)
    state_key, _ = jax.random.split(rng)
    xt = replayed_state(model, state_key, x0, maskable, batch, TRAINER_PHASES)
    logits = denoiser_logits(model, xt, batch["segment_ids"], batch["positions"])
    return result(masked_loss_sums(logits, x0, xt, maskable, mask_id(model)), collision)
