"""Pieces of the FoX mixer (zoo/mixers/fox.py): its options, the gate schedule, the token shift and cached
(decode) forgetting attention. Pure functions, tested on their own.

Paper: Lin et al., "Forgetting Transformer: Softmax Attention with a Forget Gate" (ICLR 2025, arXiv 2503.02130).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.layers import fp8_scaling
from icml26zoo.layers.options import check_choice, check_implementation
from icml26zoo.longctx import pbs
from icml26zoo.mixers.base import read_mixer_options
from icml26zoo.models.config import ModelConfig
from icml26zoo.validation import check_int, check_positive

GATES = ("full", "bias_only", "fixed", "none")
PRO_FLAGS = ("qk_norm", "token_shift", "output_norm", "output_gate")
IMPLEMENTATIONS = ("reference", "xla", "pallas")
# The Pro block's MLP hidden ratio (FoX's Pro configs), down from the Llama block's 4 to pay for the Pro
# projections; the MLP is the model's SwiGLU, so the ratio enters through ModelConfig.mlp_dim (`pro_mlp_dim`).
PRO_MLP_RATIO = 3.5
LLAMA_MLP_RATIO = 4.0


@dataclasses.dataclass(frozen=True)
class FoxOptions(fp8_scaling.FP8LogitOptions, pbs.PBSPrefillOptions):
    """The FoX mixer's `cfg.mixer_options` (fp8_* and the PBS prefill's prefill/pbs_* inherited), validated
    (see `parse_options`)."""

    gate: str = "full"
    rope: bool = False  # FoX uses no positional encoding by default (FoX's config: `use_rope: false`)
    implementation: str | tuple[str, ...] | None = None  # forgetting_attention's; None = best for the backend
    pro: bool = False  # turns on the four flags below unless one is given on its own (FoX's "Pro" block)
    qk_norm: bool = False
    token_shift: bool = False
    output_norm: bool = False
    output_gate: bool = False
    # Decay-time range of the "fixed" gate and of the "bias_only" initialization. The paper and
    # the reference code leave T_min / T_max to the experiment; these defaults are the zoo's choice.
    decay_time_min: float = 2.0
    decay_time_max: float = 1024.0


def _check_decay_times(t_min: float, t_max: float) -> None:
    for name, value in (("decay_time_min", t_min), ("decay_time_max", t_max)):
        check_positive(f"fox mixer option {name!r}", value)
    if t_min > t_max:
        raise ValueError(
            f"fox mixer options 'decay_time_min' ({t_min}) must not exceed 'decay_time_max' ({t_max})"
        )


def parse_options(cfg: ModelConfig) -> FoxOptions:
    """Reads and validates the FoX options of `cfg`; a bad name or value raises ValueError naming it.

    `pro=True` turns on all four Pro flags; an individually given flag overrides it.
    """
    values = read_mixer_options(cfg, "fox", FoxOptions)
    given = {name for name, _ in cfg.mixer_options}
    for flag in PRO_FLAGS:
        if flag not in given:
            values[flag] = values["pro"]
    check_choice("fox mixer", "gate", values["gate"], GATES)
    check_implementation("fox mixer", values["implementation"], IMPLEMENTATIONS)
    _check_decay_times(values["decay_time_min"], values["decay_time_max"])
    fp8_scaling.FP8Logits.from_options("fox mixer", values)
    options = FoxOptions(**values)
    pbs.PBSPrefill.from_options("fox mixer", options)
    return options


def pro_mlp_dim(d_model: int, hidden_ratio: float = PRO_MLP_RATIO, multiple_of: int = 256) -> int:
    """SwiGLU hidden width for FoX's blocks: multiple_of · ceil((2/3) · hidden_ratio · d_model / multiple_of).

    FoX's code rounds to multiples of 256, so d_model=768 gives 1792 with the Pro ratio 3.5 and 2048 with
    the Llama ratio 4. At the zoo's tiny widths a multiple of 256 swallows the ratio (d_model=64 gives 256
    for both), so the presets and the reproduction pass a small `multiple_of` (8). Pass the result as
    `ModelConfig.mlp_dim`; a bad argument raises ValueError naming it.
    """
    check_int("d_model", d_model)
    check_int("multiple_of", multiple_of)
    check_positive("hidden_ratio", hidden_ratio, finite=True)
    # Exact for the ratios in use (2·3.5/3 etc.) up to float rounding: round before the ceiling so that
    # an exact multiple is not pushed up by a last-bit error.
    units = round(2.0 * hidden_ratio * d_model / (3.0 * multiple_of), 9)
    return multiple_of * math.ceil(units)


def decay_bias(num_heads: int, t_min: float, t_max: float) -> np.ndarray:
    """[num_heads] float32 gate biases b_h with −1/log σ(b_h) = τ_h, τ log-spaced over [t_min, t_max].

    log σ(b) = −log(1 + e^{−b}) and e^{−b} = expm1(1/τ) give log σ(b) = −1/τ.
    Computed in float64, then rounded once.
    """
    tau = np.exp(np.linspace(math.log(t_min), math.log(t_max), num_heads))
    return (-np.log(np.expm1(1.0 / tau))).astype(np.float32)


def forget_gate_bias(log_fgate: jax.Array | None) -> tuple[jax.Array | None, jax.Array | None]:
    """The gate term of FoX's logits, Λ_i − Λ_j with Λ_t = Σ_{l≤t} log f_l, as the separable pair
    (query_bias Λ, key_bias −Λ), each [B, T, H] float32, for the PBS prefill (None, None without a gate).

    A difference of two float32 prefix sums carries the rounding of |Λ_T| (about 6e-8·|Λ_T|) into every logit,
    where the dense kernels sum each span on its own (kernels/_common/gate_sums.py); the prefill accepts it.
    """
    if log_fgate is None:
        return None, None
    lam = jnp.cumsum(log_fgate.astype(jnp.float32), axis=1)
    return lam, -lam


def segment_starts(segment_ids: jax.Array) -> jax.Array:
    """[B, T] bool: True where a token starts a segment (t = 0 or its id differs from the previous one)."""
    first = jnp.ones_like(segment_ids[:, :1], dtype=jnp.bool_)
    return jnp.concatenate([first, segment_ids[:, 1:] != segment_ids[:, :-1]], axis=1)


def token_shift(
    h: jax.Array, alpha: jax.Array, *, segment_ids: jax.Array | None = None, previous: jax.Array | None = None
) -> jax.Array:
    """Data-dependent token shift (FoX "Pro"): h̃_t = α_t·h_{t−1} + (1 − α_t)·h_t.

    h: [B, T, Hkv, Dh] (the k or v projection before the shift); alpha: [B, T, Hkv] in (0, 1), float32;
    previous: [B, Hkv, Dh], the projection of the token before h[:, 0] (decode cache), None = zeros;
    segment_ids: [B, T] or None (not together with previous). At a segment start h_{t−1} is taken as
    zero, as at the start of a sequence, so nothing crosses a boundary.
    The mix runs in float32; returns [B, T, Hkv, Dh] in h.dtype.
    """
    if previous is not None and segment_ids is not None:
        raise ValueError("token_shift takes previous (decoding, one sequence per row) or segment_ids, not both")
    first = jnp.zeros_like(h[:, :1]) if previous is None else previous[:, None].astype(h.dtype)
    before = jnp.concatenate([first, h[:, :-1]], axis=1)
    if segment_ids is not None:
        before = jnp.where(segment_starts(segment_ids)[:, :, None, None], jnp.zeros_like(before), before)
    a = alpha[..., None]
    mixed = a * before.astype(jnp.float32) + (1.0 - a) * h.astype(jnp.float32)
    return mixed.astype(h.dtype)
