"""Objective `rna_inverse_folding` of the ATL-FGD model (icml26zoo.bio.rna_design) on RNA backbones (rna_hairpins).

Batch: points [B, N, 18] (6 backbone atoms x 3), features [B, N, F] (the FGD teacher's embeddings z, F = 0 for
none), weights [B, N] (> 0 on real nucleotides), targets [B, N, 2] (native base 0..3, partner index). With
CE_ls the label-smoothed cross-entropy (model.config.label_smoothing), R the shared decoder + readout:

    L = CE_ls(R h^s, s)                                              (always)
      + λ_T CE_ls(R h^T, s)                                          (teacher given: F > 0)
      + λ_F mean(‖γ̂ - sg γ^T‖² + ‖β̂ - sg β^T‖²)
      + λ_KD τ² KL(softmax(sg R h^T / τ) ‖ softmax(R h^s / τ))
      + λ_sp Σ_ℓ (mean_ij g_ij^ℓ - ρ)²                                (learned gates; the mean over the
                                                                       learnable candidates: real, not i ± 1)
Schedules (option `anneal_steps` = S > 0; the trainer passes the step): λ_T follows the spec's cosine from
lambda_teacher0 to 0, λ_T(t) = lambda_teacher0 · (1 + cos(π min(t / S, 1))) / 2, and every gate's temperature
falls linearly from `tau_start` (1.0) to the model's gate_tau (the spec's 1.0 -> 0.3 with gate_tau 0.3), both
reaching their end at step S and staying there. Evaluation uses the end values (λ_T = 0, τ = gate_tau). With
S = 0 (the default) λ_T stays lambda_teacher0 and τ gate_tau. Means are over the real nucleotides (and hidden
channels for the FiLM term).
Metrics: loss_sum (Σ of the student's CE_ls), weight (real nucleotides), correct (student argmax = native);
with a teacher teacher_correct_sum (eval/teacher_correct: the teacher path's recovery); train diagnostics
atl/density (the mean learnable gate over layers) and fgd/film (the FiLM matching term).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from icml26zoo.losses.batch_fields import FEATURE_FIELDS, require_batch_fields
from icml26zoo.registry import register_objective
from icml26zoo.validation import check_int, check_positive

Batch = dict[str, jax.Array]


@dataclasses.dataclass(frozen=True)
class RNAObjectiveOptions:
    """Options of objective rna_inverse_folding (TrainConfig.objective_options): the schedules of the module
    docstring."""

    # S: the steps over which λ_T anneals to 0 and the gate temperature to gate_tau; 0 keeps both constant.
    anneal_steps: int = 0
    # The gate temperature at step 0 when annealing.
    tau_start: float = 1.0

    def __post_init__(self) -> None:
        check_int("rna_inverse_folding option 'anneal_steps'", self.anneal_steps, minimum=0)
        check_positive("rna_inverse_folding option 'tau_start'", self.tau_start, finite=True)


_DEFAULTS = RNAObjectiveOptions()


def schedules(options: RNAObjectiveOptions, lambda_teacher0: float, gate_tau: float, step: jax.Array | None
              ) -> tuple[jax.Array, jax.Array]:
    """(λ_T, τ) at `step` (module docstring); None (evaluation) gives the end values."""
    if not options.anneal_steps:
        return jnp.float32(lambda_teacher0), jnp.float32(gate_tau)
    if step is None:
        return jnp.float32(0.0), jnp.float32(gate_tau)
    progress = jnp.minimum(jnp.asarray(step, jnp.float32) / options.anneal_steps, 1.0)
    teacher = lambda_teacher0 * 0.5 * (1.0 + jnp.cos(math.pi * progress))
    return teacher, options.tau_start + (gate_tau - options.tau_start) * progress


def smoothed_ce(logits: jax.Array, labels: jax.Array, smoothing: float) -> jax.Array:
    """Label-smoothed cross-entropy [B, L] of logits [B, L, V] against int labels [B, L]."""
    targets = optax.smooth_labels(jax.nn.one_hot(labels, logits.shape[-1]), smoothing)
    return optax.softmax_cross_entropy(logits.astype(jnp.float32), targets)


def kd_term(student: jax.Array, teacher: jax.Array, temperature: float) -> jax.Array:
    """τ² KL(softmax(sg teacher / τ) ‖ softmax(student / τ)) per node [B, L]."""
    teacher_log = jax.nn.log_softmax(jax.lax.stop_gradient(teacher) / temperature)
    student_log = jax.nn.log_softmax(student / temperature)
    return temperature**2 * jnp.sum(jnp.exp(teacher_log) * (teacher_log - student_log), axis=-1)


def sparsity_term(gates: jax.Array, nbr_mask: jax.Array, sequential: jax.Array, density: float
                  ) -> tuple[jax.Array, jax.Array]:
    """(Σ_ℓ (mean learnable gate of layer ℓ - ρ)², mean learnable gate over layers) of gates [n, B, L, K]."""
    learnable = ((nbr_mask > 0) & (sequential == 0)).astype(jnp.float32)
    means = jnp.sum(gates * learnable, axis=(1, 2, 3)) / jnp.maximum(jnp.sum(learnable), 1.0)
    return jnp.sum(jnp.square(means - density)), jnp.mean(means)


def rna_inverse_folding(model: nnx.Module, batch: Batch, rng: jax.Array, options: RNAObjectiveOptions = _DEFAULTS,
                        *, step: jax.Array | None = None) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The ATL-FGD training loss (module docstring) at trainer step `step` (None: the schedules' end)."""
    require_batch_fields("rna_inverse_folding", batch, (*FEATURE_FIELDS, "targets"), dataset="rna_hairpins")
    config = model.config
    lambda_teacher, tau = schedules(options, config.lambda_teacher0, config.gate_tau, step)
    mask = (batch["weights"] > 0).astype(jnp.float32)
    count = jnp.maximum(jnp.sum(mask), 1.0)
    native = batch["targets"][..., 0].astype(jnp.int32)
    # Without annealing the model keeps its own temperature (the same program as before the option existed).
    logits, aux = model.forward_points(batch["points"], batch["features"], batch["weights"], key=rng,
                                       tau=tau if options.anneal_steps else None)
    ce = smoothed_ce(logits, native, config.label_smoothing) * mask
    loss = jnp.sum(ce) / count
    metrics = {"loss_sum": jnp.sum(ce), "weight": jnp.sum(mask),
               "correct": jnp.sum((jnp.argmax(logits, -1) == native).astype(jnp.float32) * mask)}
    if "teacher_logits" in aux:
        teacher_ce = smoothed_ce(aux["teacher_logits"], native, config.label_smoothing)
        film = (jnp.square(aux["gamma_s"] - jax.lax.stop_gradient(aux["gamma_t"]))
                + jnp.square(aux["beta_s"] - jax.lax.stop_gradient(aux["beta_t"])))
        film = jnp.sum(jnp.mean(film, -1) * mask) / count
        kd = jnp.sum(kd_term(logits, aux["teacher_logits"], config.kd_temp) * mask) / count
        loss = (loss + lambda_teacher * jnp.sum(teacher_ce * mask) / count + config.lambda_film * film
                + config.lambda_kd * kd)
        teacher_correct = (jnp.argmax(aux["teacher_logits"], -1) == native).astype(jnp.float32)
        metrics |= {"teacher_correct_sum": jnp.sum(teacher_correct * mask), "fgd/film": film}
    if config.gate_kind != "none":
        sparsity, density = sparsity_term(aux["gates"], aux["nbr_mask"], aux["sequential"], config.density)
        loss = loss + config.lambda_sparsity * sparsity
        metrics["atl/density"] = density
    return loss, metrics


rna_inverse_folding.options_class = RNAObjectiveOptions
rna_inverse_folding.trainer_arguments = ("step",)
rna_inverse_folding.plotted_metrics = ("atl/density",)
register_objective("rna_inverse_folding")(rna_inverse_folding)
