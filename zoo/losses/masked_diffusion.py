"""Masked diffusion LM (MDLM) training: random forward masking and the 1/n-weighted masked cross-entropy.

Used by PUMA (Kim, Geuter, Alvarez-Melis, Kakade, Chen, "Stop Training for the Worst: Progressive Unmasking
Accelerates Masked Diffusion Training", ICML 2026, arXiv 2602.10314) as its baseline; see docs/papers/puma.md.

Forward process (the reference's baseline `mdm_loss`): in a sequence x0 with L_eff maskable tokens (real tokens
that are not prompt), draw n ~ U{1, …, L_eff}, replace n uniformly chosen maskable tokens by [MASK], and train
the denoiser on

    L = (1/B) Σ_b (1/n_b) Σ_{i masked in b} −log p_θ(x0_i | x_t)

(1/n is the MDLM ELBO weight of the linear schedule, t = n / L_eff: with n uniform, L is the negative ELBO per
token, in nats). A row with nothing masked contributes 0 (the count is clamped to 1) but still counts in B.

Conventions shared by the objective, the PUMA pool (`losses.progressive_unmasking`) and the sampler
(`losses.masked_sampler`):
- The mask token is the model's last id, `vocab_size − 1`: data tokens must lie below it (a byte corpus
  needs vocab_size 257). Its output column is removed from the denoiser's softmax (it is never a target).
- The denoiser must be bidirectional: the model's mixer must declare the option causal=False (the zoo's
  convention, e.g. mixer="circulation", mixer_options=(("causal", False),)); anything else raises ValueError.
- Position signal: the zoo's bidirectional mixer has no positional encoding (no RoPE), so a fixed sinusoidal
  absolute position embedding is added to the token embeddings (scaled by sqrt(d_model), as in Vaswani et al.
  2017) before the layers. Without it every [MASK] would get the same prediction.
- Rows of the trainer's batch are the sequences: inputs [B, T] are x0, tokens with segment_ids > 0 are
  maskable, attention stays inside each packed segment, and positions come from the batch.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from icml26zoo.losses.batch_fields import MASKED_FIELDS, require_batch_fields
from icml26zoo.registry import register_objective

Batch = dict[str, jax.Array]


class MaskedSums(NamedTuple):
    """Summed statistics of a batch of masked rows (float32 scalars), adding up over batches."""

    loss_sum: jax.Array  # Σ_b (1/n_b) Σ_masked CE, nats
    weight: jax.Array  # rows with at least one maskable token
    correct: jax.Array  # Σ_b (1/n_b) Σ_masked [argmax == x0]


def mask_id(model: nnx.Module) -> int:
    """The [MASK] token id of `model`: its last vocabulary id, vocab_size − 1."""
    return int(model.cfg.vocab_size) - 1


def require_bidirectional(model: nnx.Module) -> None:
    """Raises ValueError unless the model's mixer declares causal=False (a masked denoiser must see the future)."""
    cfg = getattr(model, "cfg", None)
    if cfg is None or dict(cfg.mixer_options).get("causal", True) is not False:
        mixer = None if cfg is None else (cfg.mixer, cfg.mixer_options)
        raise ValueError(
            "masked diffusion needs a bidirectional model: its mixer must take the option causal=False "
            "(e.g. mixer='circulation', mixer_options=(('causal', False),)); got mixer and options "
            f"{mixer!r}, which attend causally")


def sinusoidal_positions(positions: jax.Array, width: int) -> jax.Array:
    """Fixed sin/cos position embedding: positions [B, T] int -> [B, T, width] float32 (Vaswani et al. 2017)."""
    half = width // 2
    frequencies = jnp.exp(-math.log(10_000.0) * jnp.arange(half, dtype=jnp.float32) / max(half, 1))
    angles = positions.astype(jnp.float32)[..., None] * frequencies
    table = jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)
    return jnp.pad(table, [(0, 0)] * (table.ndim - 1) + [(0, width - 2 * half)])


def denoiser_logits(model: nnx.Module, tokens: jax.Array, segment_ids: jax.Array | None,
                    positions: jax.Array | None) -> jax.Array:
    """The denoiser's logits [B, T, V] float32 for partially masked tokens [B, T]; the [MASK] column is −inf.

    segment_ids [B, T] (0 = padding) keep attention inside a segment; positions [B, T] (None: 0 .. T−1)
    give the sinusoidal position embedding added to the token embeddings.
    """
    require_bidirectional(model)
    if positions is None:
        positions = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
    embedded = model.embed(tokens).astype(jnp.float32)
    # Vaswani et al.'s recipe: token embeddings times sqrt(d_model), plus unit-amplitude sinusoids. A fixed
    # position signal at the embeddings' init scale is drowned once training grows the token embeddings, and
    # the denoiser then predicts the same distribution at every [MASK] (the unigram plateau).
    width = embedded.shape[-1]
    embedded = embedded * math.sqrt(width) + sinusoidal_positions(positions, width)
    logits = model.forward_embeddings(embedded, segment_ids=segment_ids, positions=positions)
    is_mask_column = jnp.arange(logits.shape[-1]) == mask_id(model)
    return jnp.where(is_mask_column, -jnp.inf, logits)


def check_ratio(field: str, ratio: object) -> None:
    """ValueError naming `field` when a concrete masking ratio (scalar or array) is not inside [0, 1]."""
    if isinstance(ratio, jax.core.Tracer):
        return
    values = np.asarray(ratio, np.float64)
    if not bool(np.all((values >= 0.0) & (values <= 1.0))):
        raise ValueError(f"{field} must lie in [0, 1] (a masking ratio), got {ratio!r}")


def reveal_ranked(scores: jax.Array, candidates: jax.Array, counts: jax.Array, rng: jax.Array) -> jax.Array:
    """Boolean [B, T]: per row, the `counts` [B] candidate positions with the highest scores [B, T].

    candidates [B, T] bool; non-candidates are never chosen. Ties in score are broken uniformly at random (a
    random secondary key), so equal confidences carry no positional bias.
    """
    tie_break = jax.random.uniform(rng, scores.shape)
    primary = jnp.where(candidates, -scores.astype(jnp.float32), jnp.inf)
    order = jnp.lexsort((tie_break, primary), axis=-1)
    rank = jnp.argsort(order, axis=-1)
    return candidates & (rank < counts[:, None])


def mask_fraction(rng: jax.Array, x0: jax.Array, maskable: jax.Array, ratio: jax.Array, mask_token: int
                  ) -> jax.Array:
    """x0 [B, T] with round(ratio · L_eff) uniformly chosen maskable positions set to `mask_token`.

    maskable [B, T] bool (L_eff = its row sums); ratio: scalar or [B] in [0, 1] (ValueError otherwise).
    """
    check_ratio("ratio", ratio)
    l_eff = jnp.sum(maskable, axis=1)
    ratio = jnp.broadcast_to(jnp.asarray(ratio, jnp.float32), l_eff.shape)
    counts = jnp.round(ratio * l_eff.astype(jnp.float32)).astype(jnp.int32)
    chosen = reveal_ranked(jnp.zeros(x0.shape), maskable, counts, rng)
    return jnp.where(chosen, mask_token, x0)


def random_masking(rng: jax.Array, x0: jax.Array, maskable: jax.Array, mask_token: int) -> jax.Array:
    """The baseline forward process: per row n ~ U{1, …, L_eff} uniformly chosen maskable tokens -> mask_token.

    x0 [B, T] int, maskable [B, T] bool -> x_t [B, T]. A row with L_eff = 0 is returned unchanged.
    """
    count_key, position_key = jax.random.split(rng)
    l_eff = jnp.sum(maskable, axis=1)
    counts = 1 + jnp.floor(jax.random.uniform(count_key, l_eff.shape) * l_eff.astype(jnp.float32)).astype(jnp.int32)
    chosen = reveal_ranked(jnp.zeros(x0.shape), maskable, jnp.minimum(counts, l_eff), position_key)
    return jnp.where(chosen, mask_token, x0)


def masked_loss_sums(logits: jax.Array, x0: jax.Array, xt: jax.Array, maskable: jax.Array, mask_token: int
                     ) -> MaskedSums:
    """The 1/n-weighted masked cross-entropy sums of logits [B, T, V] against x0 [B, T] at x_t's masks.

    Masked = maskable [B, T] and x_t == mask_token; n_b = masked count (clamped to >= 1, so a row with nothing
    masked adds 0). The loss is loss_sum / max(weight, 1).
    """
    masked = (maskable & (xt == mask_token)).astype(jnp.float32)
    per_row = 1.0 / jnp.maximum(jnp.sum(masked, axis=1), 1.0)
    token_loss = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), x0)
    # The [MASK] column is -inf, so the loss at unmasked positions can be anything finite or not: select, not
    # multiply, so it never turns into NaN.
    token_loss = jnp.where(masked > 0, token_loss, 0.0)
    correct = ((jnp.argmax(logits, axis=-1) == x0) & (masked > 0)).astype(jnp.float32)
    rows = jnp.any(maskable, axis=1).astype(jnp.float32)
    return MaskedSums(jnp.sum(per_row * jnp.sum(token_loss, axis=1)), jnp.sum(rows),
                      jnp.sum(per_row * jnp.sum(correct, axis=1)))


def result(sums: MaskedSums, collision: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """(loss, summable metrics); NaN loss when a data token equals the mask id (`collision`), a visible failure."""
    loss = sums.loss_sum / jnp.maximum(sums.weight, 1.0)
    loss = jnp.where(collision, jnp.nan, loss)
    return loss, {"loss_sum": sums.loss_sum, "weight": sums.weight, "correct": sums.correct}


def batch_sequences(model: nnx.Module, batch: Batch) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(x0 [B, T], maskable [B, T] bool, collision scalar bool) from the trainer's batch.

    Tokens of real segments are maskable; `collision` is True when a real token equals the mask id (the
    vocabulary leaves no room for [MASK]: raise model.vocab_size by one).
    """
    require_bidirectional(model)
    x0, maskable = batch["inputs"], batch["segment_ids"] > 0
    return x0, maskable, jnp.any(maskable & (x0 >= mask_id(model)))


@register_objective("mdlm")
def mdlm_objective(model: nnx.Module, batch: Batch, rng: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Masked diffusion with random masking (MDLM, linear schedule): the negative ELBO per token, in nats.

    eval/loss is the same quantity on the eval split (fixed key); eval/accuracy the 1/n-weighted masked accuracy.
    """
    require_batch_fields("mdlm", batch, MASKED_FIELDS, dataset="pystdlib")
    x0, maskable, collision = batch_sequences(model, batch)
    xt = random_masking(rng, x0, maskable, mask_id(model))
    logits = denoiser_logits(model, xt, batch["segment_ids"], batch["positions"])
    return result(masked_loss_sums(logits, x0, xt, maskable, mask_id(model)), collision)
