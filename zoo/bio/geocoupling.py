"""GeoCoupling: learned temporal coupling of the structure and sequence times in sequence-structure co-design.

Paper: K. Qiu, X. Wang, Z. Zhang, H. Zhou, W.-Y. Ma, "Demystifying Multimodal Biomolecular Co-design with
Intrinsic Geodesic Coupling" (ICML 2026, arXiv 2606.01628); page docs/papers/geocoupling.md.
No GeoCoupling code is public: the TOT path cost, the curve, the GP surrogate and the bi-level loop are a
RECONSTRUCTION from the paper's summary. The baselines are from public code: synchronous coupling (the diagonal)
and MultiFlow's random coupling and corruptions (Campbell et al. 2024, jasonkyuyim/multiflow,
multiflow/data/interpolant.py); the loss grid and monotone DP path from the precursor VOS (MolPilot, arXiv
2505.07286). Files:

    geocoupling_curve   CouplingCurve, path_cost, geodesic_dp (+ NumPy reference)
    geocoupling_gp      GPSurface (ARD RBF + noise GP per modality)
    geocoupling_times   GeoCouplingConfig, sample_times (sync / random / curve / band), CoDesignInterpolant
    geocoupling_model   the registered reference denoiser `geocoupling_denoiser`
    geocoupling_toy     the "fold-and-label" toy task and its metrics
    this module         codesign_loss, loss_surface, geodesic_update (upper level), sample (generation)

Loss (ELBO-consistent, per modality): for the linear structure path with x̂_1-prediction
L_x = min(1/(1 − t_x)², loss_clip)·mean_i ‖x̂_1,i − x_1,i‖², for masking L_s = min(1/(1 − t_s), loss_clip)·
Σ_{masked i} CE_i / N; scaled by w_x, w_s.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26zoo.bio.geocoupling_curve import (
    CouplingCurve,
    curve_times,
    geodesic_dp,
    geodesic_dp_reference,
    path_cost,
)
from icml26zoo.bio.geocoupling_gp import GPSurface
from icml26zoo.bio.geocoupling_model import GeoCouplingDenoiser, GeoCouplingDenoiserOptions
from icml26zoo.bio.geocoupling_times import CoDesignInterpolant, GeoCouplingConfig, sample_times
from icml26zoo.validation import check_int

__all__ = ["CoDesignInterpolant", "CouplingCurve", "GPSurface", "GeoCouplingConfig", "GeoCouplingDenoiser",
           "GeoCouplingDenoiserOptions", "codesign_loss", "design_points", "geodesic_dp", "geodesic_dp_reference",
           "geodesic_update", "loss_surface", "path_cost", "sample", "sample_times"]

_TINY = 1e-6
_DEFAULT_CONFIG = GeoCouplingConfig()


def codesign_loss(model: nnx.Module, x1: jax.Array, s1: jax.Array, mask: jax.Array, t: jax.Array, key: jax.Array,
                  cfg: GeoCouplingConfig = _DEFAULT_CONFIG) -> jax.Array:
    """Per-sample, per-modality losses [B, 2] (columns L_x, L_s; module docstring) of the denoiser at times
    t [B, 2] on data x1 [B, N, 3], s1 int [B, N], mask [B, N]; `key` draws the corruption."""
    interpolant = CoDesignInterpolant(model.num_tokens)
    x_t, s_t = interpolant.corrupt(key, x1, s1, t, mask)
    x1_hat, logits = model(x_t, s_t, t, mask)
    real = (mask > 0).astype(jnp.float32)
    count = jnp.maximum(jnp.sum(real, axis=1), 1.0)
    squared = jnp.sum(real * jnp.sum(jnp.square(x1_hat.astype(jnp.float32) - x1), axis=-1), axis=1) / count
    cross_entropy = -jnp.take_along_axis(jax.nn.log_softmax(logits.astype(jnp.float32)), s1[..., None].astype(
        jnp.int32), axis=-1)[..., 0]
    masked = real * (s_t == interpolant.mask_token).astype(jnp.float32)
    token_loss = jnp.sum(masked * cross_entropy, axis=1) / count
    # ELBO weights of the two paths, clipped: both blow up as t -> 1.
    weight_x = jnp.minimum(1.0 / jnp.maximum(jnp.square(1.0 - t[:, 0]), _TINY), cfg.loss_clip)
    weight_s = jnp.minimum(1.0 / jnp.maximum(1.0 - t[:, 1], _TINY), cfg.loss_clip)
    return jnp.stack([cfg.w_x * weight_x * squared, cfg.w_s * weight_s * token_loss], axis=1)


def loss_surface(model: nnx.Module, x1: jax.Array, s1: jax.Array, mask: jax.Array, points: jax.Array,
                 key: jax.Array, cfg: GeoCouplingConfig = _DEFAULT_CONFIG) -> jax.Array:
    """Mean per-modality losses [2, P] of a batch at each design point of points [P, 2], with common random
    numbers (one corruption key for every point: the same prior noise and mask uniforms), clipped to loss_clip."""
    def at(point):
        t = jnp.broadcast_to(point, (x1.shape[0], 2))
        return jnp.mean(codesign_loss(model, x1, s1, mask, t, key, cfg), axis=0)

    return jnp.minimum(jax.lax.map(at, points).T, cfg.loss_clip)


def design_points(size: int, min_t: float) -> np.ndarray:
    """A size × size design [size², 2] of (t_x, t_s) on [min_t, 1 − min_t]², t_x-major."""
    axis = np.linspace(min_t, 1.0 - min_t, check_int("size", size, minimum=2))
    return np.stack(np.meshgrid(axis, axis, indexing="ij"), axis=-1).reshape(-1, 2)


def geodesic_update(points: np.ndarray, losses: np.ndarray, cfg: GeoCouplingConfig
                    ) -> tuple[CouplingCurve, dict[str, np.ndarray]]:
    """The upper level (RECONSTRUCTION): fit a GP per modality to the losses [2, P] measured at points [P, 2],
    evaluate the posterior means on the G × G grid, find the DP geodesic on them and fit the curve's knots to it.
    Returns (the new curve, {"grid": [G, G, 2] posterior means, "path": [L, 2] the geodesic in [0, 1]²})."""
    axis = np.linspace(0.0, 1.0, cfg.grid)
    grid_points = np.stack(np.meshgrid(axis, axis, indexing="ij"), axis=-1).reshape(-1, 2)
    means = [GPSurface.fit(points, losses[m]).posterior_mean(grid_points) for m in range(2)]
    grid = np.clip(np.stack(means, axis=-1).reshape(cfg.grid, cfg.grid, 2), 0.0, cfg.loss_clip)
    path, _ = geodesic_dp_reference(grid, cfg.dp_max_step, cfg.path_objective)
    path = path / (cfg.grid - 1)
    return CouplingCurve.fit_path(path, cfg.knots), {"grid": grid, "path": path}


def sample(model: nnx.Module, curve_logits: jax.Array, key: jax.Array, steps: int, mask: jax.Array
           ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Generation along the curve: τ_k = k / S, (t_x, t_s)_k = γ(τ_k). Structure
    x ← x + (x̂_1 − x)·Δt_x / (1 − t_x); each masked residue is unmasked, with a token drawn from p̂_1, with
    probability min(1, Δt_s / (1 − t_s)); a modality with Δt_m = 0 is untouched; the last step sets x = x̂_1 and
    unmasks every residue. mask [B, N] (> 0 on real residues).

    Returns (x [B, N, 3], s int32 [B, N] (MASK on padding), masked fraction of real residues before each step
    [S])."""
    check_int("steps", steps)
    times = curve_times(jnp.asarray(curve_logits, jnp.float32), jnp.linspace(0.0, 1.0, steps + 1))  # [S + 1, 2]
    interpolant = CoDesignInterpolant(model.num_tokens)
    real = mask > 0
    prior_key, key = jax.random.split(key)
    x = interpolant.prior(prior_key, mask)
    s = jnp.full(mask.shape, interpolant.mask_token, jnp.int32)

    def step(carry, index):
        x, s, key = carry
        key, draw_key, unmask_key = jax.random.split(key, 3)
        now, delta = times[index], times[index + 1] - times[index]
        last = index == steps - 1
        x1_hat, logits = model(x, s, jnp.broadcast_to(now, (mask.shape[0], 2)), mask)
        # Δ/(1 − t) with Δ = 0 where the modality does not move (also where t = 1 already).
        rate = jnp.where(delta > 0, jnp.minimum(delta / jnp.maximum(1.0 - now, _TINY), 1.0), 0.0)
        rate = jnp.where(last, 1.0, rate)
        x = jnp.where(real[..., None], x + (x1_hat - x) * rate[0], 0.0)
        hidden = (s == interpolant.mask_token) & real
        masked_fraction = jnp.sum(hidden, dtype=jnp.float32) / jnp.maximum(jnp.sum(real, dtype=jnp.float32), 1.0)
        drawn = jax.random.categorical(draw_key, logits.astype(jnp.float32)).astype(jnp.int32)
        reveal = hidden & (jax.random.uniform(unmask_key, s.shape) < rate[1])
        return (x, jnp.where(reveal, drawn, s), key), masked_fraction

    (x, s, _), masked = jax.lax.scan(step, (x, s, key), jnp.arange(steps))
    return x, s, masked
