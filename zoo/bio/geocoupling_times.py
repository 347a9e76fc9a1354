"""GeoCoupling's configuration, the training-time coupling of the two modality times, and the corruption.

Times t [B, 2]: column 0 the structure time t_x, column 1 the sequence time t_s (0 noise, 1 data).

    sample_times   "sync"    t_x = t_s ~ U[min_t, 1 − min_t] (the diagonal)
                   "random"  MultiFlow's coupling (Campbell et al. 2024, multiflow/data/interpolant.py
                             `codesign_separate_t`): t_x, t_s ~ U[min_t, 1 − min_t] independently; a row is
                             forward folding (t_s = 1) with probability p_forward_fold, else inverse folding
                             (t_x = 1) with probability p_inverse_fold
                   "curve"   t = γ(τ), τ ~ U[0, 1], on the coupling curve (RECONSTRUCTION)
                   "band"    t = γ(τ) + ξ n(τ), n the unit normal of the curve, ξ ~ U[−band, band]; a fraction
                             p_rand of rows takes "random" times instead, so off-curve losses stay estimable
                             (RECONSTRUCTION of GeoCoupling's lower level)
                   Curve and band times are clipped into [min_t, 1 − min_t].
    CoDesignInterpolant.corrupt   MultiFlow's corruptions: x_t = (1 − t_x) x_0 + t_x x_1 with x_0 a centred
                   standard Gaussian; each residue of s is replaced by MASK (= K) with probability 1 − t_s.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from icml26zoo.bio.geocoupling_curve import PATH_OBJECTIVES, curve_times
from icml26zoo.bio.structure import centre, check_structures
from icml26zoo.validation import (
    check_choice,
    check_int,
    check_interval,
    check_non_negative,
    check_positive,
    check_probability,
)

__all__ = ["SURROGATES", "TRAIN_TIMES", "CoDesignInterpolant", "GeoCouplingConfig", "sample_times"]

TRAIN_TIMES = ("sync", "random", "curve", "band")
SURROGATES = ("surface",)


@dataclasses.dataclass(frozen=True)
class GeoCouplingConfig:
    """GeoCoupling's settings."""

    train_times: str = "band"
    # Half-width of the band of training times around the curve, perpendicular to it.
    band: float = 0.05
    # Fraction of each batch drawn with random-coupling times in "band" mode.
    p_rand: float = 0.2
    # Training times stay in [min_t, 1 − min_t]: the ELBO weights 1/(1 − t) blow up at t = 1.
    min_t: float = 1e-3
    p_forward_fold: float = 0.0
    p_inverse_fold: float = 0.0
    # J: the knots of the coupling curve.
    knots: int = 16
    # G: the upper level's loss grid is G × G (the GP posterior mean on it).
    grid: int = 16
    # E_c: lower-level steps between curve updates.
    update_every: int = 500
    # "surface": GP per modality on the loss surface, DP geodesic on its posterior mean (the only one built;
    # the spec's "curve_bo" variant, a GP over the curve's parameters, is not).
    surrogate: str = "surface"
    path_objective: str = "line_integral"
    dp_max_step: int = 3
    # Upper clip of the ELBO weights and of the loss grid's values.
    loss_clip: float = 20.0
    w_x: float = 1.0
    w_s: float = 1.0
    sample_steps: int = 100

    def __post_init__(self) -> None:
        check_choice("train_times", self.train_times, TRAIN_TIMES)
        check_interval("band", self.band, 0.0, 0.5)
        check_probability("p_rand", self.p_rand)
        check_interval("min_t", self.min_t, 0.0, 0.5, closed="neither")
        check_probability("p_forward_fold", self.p_forward_fold)
        check_probability("p_inverse_fold", self.p_inverse_fold)
        if self.p_forward_fold + self.p_inverse_fold > 1.0:
            raise ValueError(f"p_forward_fold + p_inverse_fold must be at most 1, got {self.p_forward_fold} + "
                             f"{self.p_inverse_fold}")
        check_int("knots", self.knots, minimum=2)
        check_int("grid", self.grid, minimum=2)
        check_int("update_every", self.update_every)
        check_choice("surrogate", self.surrogate, SURROGATES)
        check_choice("path_objective", self.path_objective, PATH_OBJECTIVES)
        check_int("dp_max_step", self.dp_max_step)
        check_positive("loss_clip", self.loss_clip, finite=True)
        check_non_negative("w_x", self.w_x, finite=True)
        check_non_negative("w_s", self.w_s, finite=True)
        check_int("sample_steps", self.sample_steps)


def _random_times(key: jax.Array, batch: int, cfg: GeoCouplingConfig) -> jax.Array:
    time_key, fold_key = jax.random.split(key)
    t = jax.random.uniform(time_key, (batch, 2), minval=cfg.min_t, maxval=1.0 - cfg.min_t)
    u = jax.random.uniform(fold_key, (batch,))
    forward = u < cfg.p_forward_fold
    inverse = (u >= cfg.p_forward_fold) & (u < cfg.p_forward_fold + cfg.p_inverse_fold)
    t = t.at[:, 1].set(jnp.where(forward, 1.0, t[:, 1]))
    return t.at[:, 0].set(jnp.where(inverse, 1.0, t[:, 0]))


def _band_offsets(key: jax.Array, logits: jax.Array, tau: jax.Array, band: float) -> jax.Array:
    """ξ n(τ) [B, 2]: the curve's unit normal at τ (of its linear segment) times ξ ~ U[−band, band]."""
    count = logits.shape[-1]
    knots = curve_times(logits, jnp.linspace(0.0, 1.0, count + 1))  # [J + 1, 2]
    index = jnp.clip(jnp.floor(tau * count).astype(jnp.int32), 0, count - 1)
    tangent = knots[index + 1] - knots[index]
    normal = jnp.stack([-tangent[:, 1], tangent[:, 0]], axis=1)
    normal = normal / jnp.maximum(jnp.linalg.norm(normal, axis=1, keepdims=True), 1e-12)
    return normal * jax.random.uniform(key, tau.shape + (1,), minval=-band, maxval=band)


def sample_times(key: jax.Array, batch: int, cfg: GeoCouplingConfig, curve_logits: jax.Array | None = None,
                 mode: str | None = None) -> jax.Array:
    """Training times t [batch, 2] of mode `mode` (default cfg.train_times); curve_logits [2, J] for "curve"
    and "band" (None: the diagonal)."""
    mode = cfg.train_times if mode is None else check_choice("mode", mode, TRAIN_TIMES)
    check_int("batch", batch)
    if mode == "sync":
        t = jax.random.uniform(key, (batch,), minval=cfg.min_t, maxval=1.0 - cfg.min_t)
        return jnp.stack([t, t], axis=1)
    if mode == "random":
        return _random_times(key, batch, cfg)
    logits = jnp.zeros((2, cfg.knots)) if curve_logits is None else jnp.asarray(curve_logits, jnp.float32)
    tau_key, band_key, mix_key, random_key = jax.random.split(key, 4)
    tau = jax.random.uniform(tau_key, (batch,))
    t = curve_times(logits, tau)
    if mode == "band":
        t = t + _band_offsets(band_key, logits, tau, cfg.band)
    t = jnp.clip(t, cfg.min_t, 1.0 - cfg.min_t)
    if mode == "band":
        mixed = jax.random.bernoulli(mix_key, cfg.p_rand, (batch, 1))
        t = jnp.where(mixed, _random_times(random_key, batch, cfg), t)
    return t


@dataclasses.dataclass(frozen=True)
class CoDesignInterpolant:
    """MultiFlow's linear structure path and masking sequence path; MASK is token `num_tokens`."""

    num_tokens: int

    def __post_init__(self) -> None:
        check_int("num_tokens", self.num_tokens)

    @property
    def mask_token(self) -> int:
        return self.num_tokens

    def prior(self, key: jax.Array, mask: jax.Array) -> jax.Array:
        """x_0 [B, N, 3]: a standard Gaussian centred over the real residues (padding 0)."""
        noise = jax.random.normal(key, mask.shape + (3,))
        return jnp.where((mask > 0)[..., None], centre(noise, mask), 0.0)

    def corrupt(self, key: jax.Array, x1: jax.Array, s1: jax.Array, t: jax.Array, mask: jax.Array
                ) -> tuple[jax.Array, jax.Array]:
        """(x_t [B, N, 3], s_t int32 [B, N]) from data x1 [B, N, 3], s1 int [B, N], times t [B, 2], mask [B, N]
        (> 0 on real residues). Padding residues get x_t = 0 and MASK."""
        check_structures(x1, mask, "x1")
        if t.shape != (x1.shape[0], 2):
            raise ValueError(f"t must be [B, 2] = {[x1.shape[0], 2]}, got shape {list(t.shape)}")
        noise_key, mask_key = jax.random.split(key)
        x0 = self.prior(noise_key, mask)
        tx, ts = t[:, 0, None, None], t[:, 1, None]
        x_t = jnp.where((mask > 0)[..., None], (1.0 - tx) * x0 + tx * x1, 0.0)
        hidden = (jax.random.uniform(mask_key, s1.shape) >= ts) | (mask <= 0)
        return x_t, jnp.where(hidden, self.mask_token, s1).astype(jnp.int32)
