"""Objective `geocoupling_codesign`: GeoCoupling's lower level (icml26zoo.bio.geocoupling).

On a batch of co-design examples (dataset fold_and_label: points [B, N, 3] the structure, targets [B, N, 1] the
tokens as floats, weights [B, N] > 0 on real residues) it draws training times t [B, 2] by the coupling
`train_times` ("sync", "random", "curve" or "band" around the curve given by `curve`), corrupts both modalities and
returns the mean over rows of the ELBO-weighted L_x + L_s (`codesign_loss`). The curve's knot logits travel as the
flat tuple `curve` (2·knots floats, structure row first; empty: the diagonal), so a bi-level run moves the curve by
resuming the trainer with new objective options (repro/geocoupling.py).
Metrics:
    loss_sum, weight       Σ rows of L_x + L_s, the number of real rows (eval/loss)
    loss_x_sum, loss_s_sum Σ rows of each modality's term (both logged: their scales tilt the geodesic)
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.bio.geocoupling import GeoCouplingConfig, codesign_loss, sample_times
from icml26zoo.bio.geocoupling_times import TRAIN_TIMES
from icml26zoo.losses.batch_fields import require_batch_fields
from icml26zoo.registry import register_objective
from icml26zoo.validation import (
    check_choice,
    check_finite,
    check_int,
    check_interval,
    check_non_negative,
    check_positive,
    check_probability,
)

Batch = dict[str, jax.Array]
FIELDS = ("points", "targets", "weights")


@dataclasses.dataclass(frozen=True)
class GeoCouplingCodesignOptions:
    """Options of objective geocoupling_codesign (TrainConfig.objective_options); see GeoCouplingConfig."""

    train_times: str = "band"
    knots: int = 16
    # Flat knot logits [2 · knots] (structure then sequence); () is the diagonal.
    curve: tuple[float, ...] = ()
    band: float = 0.05
    p_rand: float = 0.2
    min_t: float = 1e-3
    p_forward_fold: float = 0.0
    p_inverse_fold: float = 0.0
    loss_clip: float = 20.0
    w_x: float = 1.0
    w_s: float = 1.0

    def __post_init__(self) -> None:
        owner = "geocoupling_codesign option"
        check_choice(f"{owner} 'train_times'", self.train_times, TRAIN_TIMES)
        check_int(f"{owner} 'knots'", self.knots, minimum=2)
        curve = tuple(check_finite(f"{owner} 'curve[i]'", v) for v in self.curve)
        if curve and len(curve) != 2 * self.knots:
            raise ValueError(f"{owner} 'curve' must hold 2 · knots = {2 * self.knots} logits (or none), got "
                             f"{len(curve)}")
        object.__setattr__(self, "curve", curve)
        check_interval(f"{owner} 'band'", self.band, 0.0, 0.5)
        check_probability(f"{owner} 'p_rand'", self.p_rand)
        check_interval(f"{owner} 'min_t'", self.min_t, 0.0, 0.5, closed="neither")
        check_probability(f"{owner} 'p_forward_fold'", self.p_forward_fold)
        check_probability(f"{owner} 'p_inverse_fold'", self.p_inverse_fold)
        check_positive(f"{owner} 'loss_clip'", self.loss_clip, finite=True)
        check_non_negative(f"{owner} 'w_x'", self.w_x, finite=True)
        check_non_negative(f"{owner} 'w_s'", self.w_s, finite=True)

    def config(self) -> GeoCouplingConfig:
        fields = {f.name for f in dataclasses.fields(GeoCouplingConfig)}
        return GeoCouplingConfig(**{k: v for k, v in dataclasses.asdict(self).items() if k in fields})

    def curve_logits(self) -> jax.Array:
        """[2, knots]: the curve's logits (zeros, the diagonal, when `curve` is empty)."""
        if not self.curve:
            return jnp.zeros((2, self.knots), jnp.float32)
        return jnp.asarray(self.curve, jnp.float32).reshape(2, self.knots)


_DEFAULTS = GeoCouplingCodesignOptions()


def geocoupling_codesign(model: nnx.Module, batch: Batch, rng: jax.Array,
                         options: GeoCouplingCodesignOptions = _DEFAULTS) -> tuple[jax.Array, dict[str, jax.Array]]:
    """ELBO-weighted co-design loss at coupled training times (module docstring)."""
    require_batch_fields("geocoupling_codesign", batch, FIELDS, dataset="fold_and_label")
    time_key, corrupt_key = jax.random.split(rng)
    x1, mask = batch["points"].astype(jnp.float32), batch["weights"]
    s1 = jnp.round(batch["targets"][..., 0]).astype(jnp.int32)
    cfg = options.config()
    t = sample_times(time_key, x1.shape[0], cfg, options.curve_logits())
    losses = codesign_loss(model, x1, s1, mask, t, corrupt_key, cfg)  # [B, 2]
    rows = jnp.any(mask > 0, axis=1).astype(jnp.float32)
    weight = jnp.sum(rows)
    metrics = {"loss_sum": jnp.sum(rows * losses.sum(axis=1)), "weight": weight,
               "loss_x_sum": jnp.sum(rows * losses[:, 0]), "loss_s_sum": jnp.sum(rows * losses[:, 1])}
    return metrics["loss_sum"] / jnp.maximum(weight, 1.0), metrics


geocoupling_codesign.options_class = GeoCouplingCodesignOptions
register_objective("geocoupling_codesign")(geocoupling_codesign)
