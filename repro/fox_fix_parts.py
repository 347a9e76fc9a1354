"""Pieces of the FoX / FiX reproduction (repro/fox_fix.py): the compared variants, parameter matching,
and the length-extrapolation evaluator. Pure functions over configs and models, tested on their own.

Variants (name -> registered mixer, mixer options):
  softmax   the zoo's causal softmax attention with RoPE (its default position encoding): the baseline and
            the extrapolation reference;
  fox       FoX, data-dependent scalar forget gate, no positional encoding (FoX's default);
  fox_pro   FoX with the Pro block (QK-norm, k/v token shift, output norm and gate) and MLP ratio 3.5;
  fix       FiX (a reconstruction from its abstract): per-channel value forget gates, scalar gate, output
            RMSNorm and gate, no RoPE;
  fix_rope  the same FiX with RoPE on q and k (the abstract's claim: VO encoding complements QK encoding).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26zoo.mixers.fox_parts import LLAMA_MLP_RATIO, PRO_MLP_RATIO, pro_mlp_dim
from icml26zoo.models import ModelConfig
from icml26zoo.repro.common import parameter_count
from icml26zoo.repro.lengths import LengthLoss, check_lengths
from icml26zoo.train.config import TrainConfig
from icml26zoo.train.data import make_eval_iterator
from icml26zoo.validation import check_int

Options = tuple[tuple[str, Any], ...]

VARIANTS: dict[str, tuple[str, Options]] = {
    "softmax": ("attention", ()),
    "fox": ("fox", ()),
    "fox_pro": ("fox", (("pro", True),)),
    "fix": ("fix", ()),
    "fix_rope": ("fix", (("rope", True),)),
}
REFERENCE = "softmax"
# The MLP ratio each variant's paper gives its block; FiX's paper is not available, so it has none and its
# MLP is sized to match the reference's parameter count instead.
SPEC_MLP_RATIOS = {"softmax": LLAMA_MLP_RATIO, "fox": LLAMA_MLP_RATIO, "fox_pro": PRO_MLP_RATIO}
MLP_MULTIPLE = 8  # rounding of the MLP width at the zoo's tiny scale (FoX's code rounds to 256 at d >= 768)
PARAM_TOLERANCE = 0.03  # matched parameters: every count within 3% of the reference's


def variant_model(base: ModelConfig, variant: str, mlp_dim: int | None = None) -> ModelConfig:
    """`base` with the variant's mixer and options (and `mlp_dim` when given)."""
    mixer, options = VARIANTS[variant]
    return dataclasses.replace(base, mixer=mixer, mixer_options=options,
                               mlp_dim=base.mlp_dim if mlp_dim is None else mlp_dim)



def matched_mlp_dims(base: ModelConfig, variants: Sequence[str]) -> dict[str, tuple[int, int]]:
    """variant -> (mlp_dim, parameter count), matched to the softmax reference of the same `base` shape.

    A variant with a spec ratio (softmax, FoX: 4; FoX Pro: 3.5) gets the width `pro_mlp_dim` gives it, and
    keeps it when its count is within PARAM_TOLERANCE of the reference's; otherwise (FiX, whose paper gives
    no ratio, or a spec width that misses) the multiple of MLP_MULTIPLE whose count is closest to the
    reference's. Raises ValueError when no width gets within the tolerance.
    """
    reference_dim = pro_mlp_dim(base.d_model, SPEC_MLP_RATIOS[REFERENCE], MLP_MULTIPLE)
    target = parameter_count(variant_model(base, REFERENCE, reference_dim))
    matched = {}
    for variant in variants:
        ratio = SPEC_MLP_RATIOS.get(variant)
        mlp_dim = None if ratio is None else pro_mlp_dim(base.d_model, ratio, MLP_MULTIPLE)
        count = None if mlp_dim is None else parameter_count(variant_model(base, variant, mlp_dim))
        if count is None or abs(count / target - 1) > PARAM_TOLERANCE:
            mlp_dim, count = _closest_mlp_dim(base, variant, target)
        if abs(count / target - 1) > PARAM_TOLERANCE:
            raise ValueError(f"variant {variant!r}: no MLP width matches the reference's {target:,} parameters "
                             f"within {PARAM_TOLERANCE:.0%} (closest: mlp_dim={mlp_dim}, {count:,})")
        matched[variant] = (mlp_dim, count)
    return matched


def _closest_mlp_dim(base: ModelConfig, variant: str, target: int) -> tuple[int, int]:
    """The multiple of MLP_MULTIPLE whose parameter count is closest to `target`: counts are affine in
    mlp_dim, so two counts give the slope and the solution, rounded to the nearest multiple."""
    low, high = MLP_MULTIPLE, 2 * MLP_MULTIPLE
    count_low, count_high = (parameter_count(variant_model(base, variant, d)) for d in (low, high))
    per_unit = (count_high - count_low) / (high - low)
    best = max(MLP_MULTIPLE, MLP_MULTIPLE * round((low + (target - count_low) / per_unit) / MLP_MULTIPLE))
    return best, parameter_count(variant_model(base, variant, best))




def _position_sums(model: nnx.Module, batch: Mapping[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
    """Per-position loss sums and weights [T] float32 of one batch [B, T], positions taken inside each
    segment (a document piece restarts at 0, so position p always means p tokens of context)."""
    logits = model(batch["inputs"], segment_ids=batch["segment_ids"], positions=batch["positions"])
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    nll = -jnp.take_along_axis(log_probs, batch["targets"][..., None], axis=-1)[..., 0]
    weights = batch["weights"].astype(jnp.float32)
    length = batch["inputs"].shape[1]
    positions = batch["positions"].reshape(-1)
    loss_sums = jnp.zeros(length, jnp.float32).at[positions].add((nll * weights).reshape(-1))
    weight_sums = jnp.zeros(length, jnp.float32).at[positions].add(weights.reshape(-1))
    return loss_sums, weight_sums


@nnx.jit
def _position_sums_jit(model: nnx.Module, batch: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
    return _position_sums(model, batch)



def length_losses(model: nnx.Module, config: TrainConfig, lengths: Sequence[int], *,
                  rows: int) -> dict[int, LengthLoss]:
    """Eval loss of `model` on the eval split of `config.data` at each sequence length in `lengths`.

    Every length sees the same tokens: the first `rows` rows of max(lengths) tokens, re-cut into
    rows · max(lengths) / L rows of L (the byte corpus is packed by concatenation, so the rows of any length
    are consecutive pieces of one stream; a document crossing a row boundary continues as a new segment).
    Each length must divide max(lengths) and be at most `config.model.max_seq_len` (ValueError otherwise).
    """
    lengths = check_lengths(lengths, config.model.max_seq_len)
    check_int("rows", rows)
    longest = lengths[-1]
    for length in lengths:
        if longest % length:
            raise ValueError(f"lengths must divide the longest one ({longest}), got {length}")
    results = {}
    for length in lengths:
        iterator = make_eval_iterator(config.data, batch_size=rows * longest // length, seq_len=length,
                                      max_batches=1)
        batch = {key: jnp.asarray(value) for key, value in next(iterator).items() if key != "labels"}
        loss_sums, weight_sums = (np.asarray(a, np.float64) for a in _position_sums_jit(model, batch))
        total = float(weight_sums.sum())
        with np.errstate(invalid="ignore", divide="ignore"):
            position_bits = np.where(weight_sums > 0, loss_sums / weight_sums, np.nan) / math.log(2)
        results[length] = LengthLoss(length, float(loss_sums.sum() / max(total, 1.0) / math.log(2)), int(total),
                                     position_bits, weight_sums.astype(np.int64))
    return results
