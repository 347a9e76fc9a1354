"""Reproduction: rank-aware FP8 (E4M3) attention-logit scaling on a trained zoo LM, the checkpoint-load transient.

Paper: Emadi, "Rank-Aware Spectral Bounds on Attention Logits for Stable Low-Precision Training" (ICML 2026,
arXiv 2602.18851); docs/papers/fp8_rank_aware.md. The scenario is the paper's "loading pretrained weights"
transient: a delayed-scaling (amax) recipe calibrated its per-layer scale on the logits of the freshly initialised
model; then the trained checkpoint is loaded. The tiny attention LM (2 layers, d_model 64, 4 heads / 2 KV heads,
RoPE; the YAQA experiment's cell) is trained by the shared trainer on the byte corpus, once per seed. For each
attention layer of the trained model, on `eval_rows` held-out rows, it reports the largest logit, how many logits
overflow E4M3 with the stale amax scale and with the two scales computed from the trained weights (RoPE-safe
factor c_h = ‖W_Q,h‖‖W_K,h‖): "spectral" (the deterministic ρ_max² c_h / √d_h, ρ_max the largest mixer-input
norm of the batch) and "rank_aware" (the probabilistic rank-aware tail bound ρ² c_h / √d_h · (√r √(2ℓ) + 2ℓ),
ρ² the mean squared input norm / D, r = d_h, ℓ = log(2T²/δ), δ = 1e-6), each scale's use of the range, the
tightness of both bounds against the rank-agnostic one (the same tail bound with r = D), and the error of the
mixer's rank-aware FP8-logit forward against its float32 forward.

A second table sweeps the rank: random M = A Bᵀ of rank r in dimension d, T isotropic Gaussian tokens, per draw
the rank-aware bound over the rank-agnostic one, the spectral bound over it, max|S| over the rank-aware bound,
and how often each scale overflows (the rank-aware bound claims at most δ of the draws).

    python -m icml26zoo.repro fp8_rank_aware --out runs/repro/fp8_rank_aware   # FULL: 400 steps of 16 x 64 bytes
    python -m icml26zoo.repro fp8_rank_aware --quick                          # 20 steps, 200 draws per rank
"""

from __future__ import annotations

import dataclasses
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from matplotlib.figure import Figure

from icml26zoo.diagnostics import capture_forward
from icml26zoo.diagnostics.capture import unrolled
from icml26zoo.layers import fp8_scaling as f8
from icml26zoo.mixers.attention import Attention
from icml26zoo.models import ModelConfig, build_model
from icml26zoo.repro.common import Budget, Experiment, Results, markdown_table
from icml26zoo.repro.registry import register_experiment
from icml26zoo.repro.stored import stored
from icml26zoo.train import load_run
from icml26zoo.train.config import TrainConfig
from icml26zoo.train.data import make_eval_iterator
from icml26zoo.train.presets import tiny_byte_lm
from icml26zoo.validation import check_int, check_interval

__all__ = ["FULL", "QUICK", "QUICK_ARGS", "SMOKE", "SMOKE_ARGS", "layer_rows", "rank_sweep", "run"]

# The page's run: the YAQA experiment's LM cell, 400 steps of 16 x 64 bytes, seeds 0, 1, 2; 4 held-out rows of 64
# bytes.
FULL = Budget(steps=400, batch_size=16, seq_len=64, seeds=(0, 1, 2))
QUICK = Budget(steps=20, batch_size=4, seq_len=32, seeds=(0,))
# Every stage (training, both scales, the FP8 forward, the figure) on 2 steps and one held-out row.
SMOKE = Budget(steps=2, batch_size=2, seq_len=16, seeds=(0,))
SMOKE_ARGS = {"eval_rows": 1, "sweep_trials": 4}
QUICK_ARGS = {"sweep_trials": 200}
COLUMNS = ("seed", "layer", "max_abs_logit", "amax_scale_at_init", "overflow_amax", "overflow_spectral",
           "overflow_rank_aware", "logits", "utilization_spectral", "utilization_rank_aware",
           "spectral_over_agnostic", "rank_aware_over_agnostic", "max_over_rank_aware_bound", "fp8_rel_error")
SWEEP_COLUMNS = ("dim", "rank", "draws", "rank_aware_over_agnostic", "spectral_over_agnostic",
                 "max_over_rank_aware_median", "max_over_rank_aware_max", "overflow_rate_rank_aware",
                 "overflow_rate_agnostic", "overflow_rate_spectral")
# The rank sweep: model widths d, ranks r <= d, T tokens per draw, logits scaled by 1/√d_h with d_h = 16.
SWEEP_DIMS = (64, 1024)
SWEEP_RANKS = (1, 4, 16, 64)
SWEEP_LENGTH = 64
SWEEP_HEAD_DIM = 16


@register_experiment("fp8_rank_aware", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     quick_args=QUICK_ARGS, page="docs/papers/fp8_rank_aware.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, headroom: float = 0.8, eval_rows: int = 4,
        sweep_trials: int = 1000, resume: bool = False) -> Results:
    """Trains the LM per seed and measures every layer's scaled logits after the load; writes results.md/json and
    fp8_transient.png.

    Args:
      run_dir: the experiment's directory (cells, the byte corpus, results).
      budget: steps, batch size, row length and seeds of the LM (the held-out rows have the same length).
      headroom: u in (0, 1]: both scales aim the largest logit at u · 448.
      eval_rows: held-out rows the logits are measured on (>= 1).
      sweep_trials: random draws per (d, r) of the rank sweep (>= 1).
      resume: require run_dir to exist; finished cells are reused either way.
    """
    check_interval("headroom", headroom, 0, 1, closed="right")
    check_int("eval_rows", eval_rows)
    check_int("sweep_trials", sweep_trials)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    config = _config(experiment)
    devices = jax.devices()[:1]
    rows = []
    for seed in budget.seeds:
        cell = f"lm_seed{seed}"
        experiment.train_cell(cell, experiment.cell_config(config, seed=seed, checkpoints=1), devices=devices,
                              final_eval=False)

        def measure(cell: str = cell) -> list[dict]:
            cell_config, trained, _ = load_run(experiment.cell_dir(cell), devices=devices)
            initial = build_model(cell_config.model, rngs=nnx.Rngs(cell_config.seed))
            batch = next(iter(make_eval_iterator(cell_config.data, batch_size=eval_rows, seq_len=budget.seq_len)))
            return layer_rows(initial, trained, jnp.asarray(batch["inputs"]), headroom)

        # Kept in the cell: a resumed run reuses a finished measurement as it reuses the trained cell.
        layers = stored(experiment.cell_dir(cell) / "fp8_layers.json",
                        {"headroom": headroom, "eval_rows": eval_rows, "modes": "spectral,rank_aware"}, measure)
        rows += [{"seed": seed, **row} for row in layers]
    sweep = rank_sweep(trials=sweep_trials, headroom=headroom)
    notes = [
        f"Model: the tiny attention LM (2 layers, d_model 64, 4 heads / 2 KV heads, RoPE) trained by the shared "
        f"trainer on the byte corpus. The amax scale (headroom {headroom:g}) is calibrated on the freshly "
        f"initialised model's logits; then the trained checkpoint is loaded and the logits are measured on "
        f"{eval_rows} held-out row(s) of {budget.seq_len} bytes.",
        "overflow_*: logits an E4M3 cast loses (|s·S| > 448, NaN) with the stale amax scale, the spectral scale "
        "and the rank-aware scale; utilization_*: s · max|S| / 448; *_over_agnostic: the bound over the "
        "rank-agnostic tail bound (r = D) of the same call (< 1: tighter); max_over_rank_aware_bound: max|S| over "
        "the rank-aware bound (> 1 would be a failure of it); fp8_rel_error: max |rank-aware FP8-logit mixer − "
        "float32 mixer| / max |float32 mixer|.",
        "",
        f"**Rank sweep** ({sweep_trials} draws per row; M = A Bᵀ with A, B [d, r] Gaussian, {SWEEP_LENGTH} "
        f"isotropic N(0, I_d) tokens, S = x_i M x_j / √{SWEEP_HEAD_DIM} over all pairs, δ = "
        f"{f8.RANK_AWARE_DELTA:g}, headroom {headroom:g}; ratios are means over the draws; overflow_rate_*: the "
        "fraction of draws with any logit past 448 at that bound's scale):",
        "",
        *markdown_table(sweep, SWEEP_COLUMNS),
        "",
        "**Per layer of the trained LM:**",
    ]
    return experiment.write(rows, columns=COLUMNS, notes=notes, figures={"fp8_transient": _figure(rows)},
                            extra={"rank_sweep": sweep},
                            title="Rank-aware FP8 logit scales vs a stale amax scale after loading a checkpoint")


def _config(experiment: Experiment) -> TrainConfig:
    """The YAQA experiment's LM: the tiny byte LM with its corpus under the run directory, one final eval."""
    config = tiny_byte_lm("attention")
    budget = experiment.budget
    data = dataclasses.replace(config.data, data_dir=str(experiment.run_dir / "tfds"))
    model = dataclasses.replace(config.model, max_seq_len=max(64, budget.seq_len))
    optim = dataclasses.replace(config.optim, warmup_steps=max(1, budget.steps // 10))
    return dataclasses.replace(config, model=model, data=data, optim=optim, eval_every=0, eval_batches=4,
                               log_every=max(1, budget.steps // 20))


def _finite_abs_max(logits: jax.Array) -> float:
    return float(jnp.max(jnp.where(jnp.isfinite(logits), jnp.abs(logits), 0.0)))


def _masked(logits: jax.Array) -> jax.Array:
    return jnp.where(jnp.isfinite(logits), logits, 0.0)


def _fp8_mixer(cfg: ModelConfig, mixer: Attention, mode: str, headroom: float) -> Attention:
    """A copy of the attention mixer (built from the model config `cfg`) with its parameters and fp8_logits = mode."""
    fp8_cfg = dataclasses.replace(cfg, mixer_options=(*cfg.mixer_options, ("fp8_logits", mode),
                                                      ("fp8_headroom", headroom)))
    fp8_mixer = Attention(fp8_cfg, rngs=nnx.Rngs(0))
    nnx.update(fp8_mixer, nnx.state(mixer, nnx.Param))
    return fp8_mixer


def layer_rows(initial: nnx.Module, trained: nnx.Module, tokens: jax.Array, headroom: float = 0.8) -> list[dict]:
    """One row per layer of two attention LMs of one config: the amax scale of `initial`'s logits applied to
    `trained`'s, against the spectral and rank-aware scales of `trained`'s weights. tokens [B, T]."""
    before, after = unrolled(initial), unrolled(trained)
    inputs_before = capture_forward(before, tokens, materialize_attention=False)["mixer_in"]
    inputs_after = capture_forward(after, tokens, materialize_attention=False)["mixer_in"]
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
    rows = []
    for index, (old, new) in enumerate(zip(before.layers, after.layers, strict=True)):
        mixer = new.mixer
        naive = f8.amax_scale(old.mixer.attention_logits(inputs_before[index], positions=positions), headroom)
        x = inputs_after[index]
        logits = _masked(mixer.attention_logits(x, positions=positions))
        spectral, aware = (_fp8_mixer(trained.cfg, mixer, mode, headroom) for mode in ("spectral", "rank_aware"))
        scales = {"spectral": spectral.fp8_scales(x), "rank_aware": aware.fp8_scales(x)}
        exact, _ = mixer(x, positions=positions)
        approx, _ = aware(x, positions=positions)
        # Bounds from the scales (s = u·448/B̂); the rank-agnostic bound is the tail bound with r = D.
        bounds = {mode: headroom * f8.E4M3_MAX / scale for mode, scale in scales.items()}
        length, width = x.shape[1], x.shape[-1]
        agnostic = bounds["rank_aware"] * f8.tail_factor(width, length) / f8.tail_factor(mixer.head_dim, length)
        per_head_max = jnp.max(jnp.abs(logits), axis=(0, 2, 3))
        rows.append({
            "layer": index,
            "max_abs_logit": float(jnp.max(per_head_max)),
            "amax_scale_at_init": float(naive),
            "overflow_amax": int(f8.overflow_count(logits, naive)),
            **{f"overflow_{mode}": int(f8.overflow_count(logits, scale[None, :, None, None]))
               for mode, scale in scales.items()},
            "logits": int(jnp.sum(jnp.isfinite(mixer.attention_logits(x, positions=positions)))),
            **{f"utilization_{mode}": float(jnp.max(per_head_max * scale) / f8.E4M3_MAX)
               for mode, scale in scales.items()},
            "spectral_over_agnostic": float(jnp.max(bounds["spectral"] / agnostic)),
            "rank_aware_over_agnostic": float(jnp.max(bounds["rank_aware"] / agnostic)),
            "max_over_rank_aware_bound": float(jnp.max(per_head_max / bounds["rank_aware"])),
            "fp8_rel_error": float(jnp.max(jnp.abs(approx - exact)) / jnp.max(jnp.abs(exact))),
        })
    return rows


def rank_sweep(*, trials: int, headroom: float = 0.8, dims: tuple[int, ...] = SWEEP_DIMS,
               ranks: tuple[int, ...] = SWEEP_RANKS, length: int = SWEEP_LENGTH, head_dim: int = SWEEP_HEAD_DIM,
               seed: int = 0) -> list[dict]:
    """One row per (d, r <= d): `trials` draws of M = A Bᵀ (A, B [d, r] standard Gaussian) and T = `length`
    tokens x ~ N(0, I_d), logits S = x M xᵀ / √d_h [T, T] (float64). Per draw: the rank-aware, rank-agnostic
    (r = d) and spectral (ρ_max² σ / √d_h) bounds with σ = σ_max(M) from the r × r Gram product, and whether
    any logit overflows E4M3 at each scale u·448/B̂."""
    rng = np.random.default_rng(seed)
    rows = []
    for dim in dims:
        for rank in (r for r in ranks if r <= dim):
            aware_ratio, spectral_ratio, over, overflows = [], [], [], {"rank_aware": 0, "agnostic": 0, "spectral": 0}
            for _ in range(trials):
                a, b = rng.normal(size=(dim, rank)), rng.normal(size=(dim, rank))
                x = rng.normal(size=(length, dim))
                sigma = math.sqrt(np.linalg.eigvals((a.T @ a) @ (b.T @ b)).real.max())
                observed = float(np.max(np.abs((x @ a) @ (x @ b).T)) / math.sqrt(head_dim))
                rho_sq = float(np.mean(np.sum(x * x, axis=-1)) / dim)
                bounds = {"rank_aware": float(f8.probabilistic_bound(sigma, math.sqrt(rho_sq), head_dim, rank, length)),
                          "agnostic": float(f8.probabilistic_bound(sigma, math.sqrt(rho_sq), head_dim, dim, length)),
                          "spectral": float(np.max(np.sum(x * x, axis=-1))) * sigma / math.sqrt(head_dim)}
                aware_ratio.append(bounds["rank_aware"] / bounds["agnostic"])
                spectral_ratio.append(bounds["spectral"] / bounds["agnostic"])
                over.append(observed / bounds["rank_aware"])
                for name, bound in bounds.items():
                    overflows[name] += observed * headroom * f8.E4M3_MAX / bound > f8.E4M3_MAX
            rows.append({"dim": dim, "rank": rank, "draws": trials,
                         "rank_aware_over_agnostic": float(np.mean(aware_ratio)),
                         "spectral_over_agnostic": float(np.mean(spectral_ratio)),
                         "max_over_rank_aware_median": float(np.median(over)),
                         "max_over_rank_aware_max": float(np.max(over)),
                         **{f"overflow_rate_{name}": count / trials for name, count in overflows.items()}})
    return rows


def _figure(rows: list[dict]) -> Figure:
    """The first seed's scaled largest logit per layer: stale amax scale, spectral scale, rank-aware scale."""
    rows = [r for r in rows if r["seed"] == rows[0]["seed"]]
    figure = Figure(figsize=(6.5, 3.8), layout="constrained")
    axes = figure.add_subplot()
    layers = np.arange(len(rows))
    bars = {"amax scale from init (stale)": [r["max_abs_logit"] * r["amax_scale_at_init"] / f8.E4M3_MAX
                                             for r in rows],
            "spectral scale (trained weights)": [r["utilization_spectral"] for r in rows],
            "rank-aware scale (trained weights)": [r["utilization_rank_aware"] for r in rows]}
    for offset, (label, values) in zip((-0.27, 0.0, 0.27), bars.items(), strict=True):
        axes.bar(layers + offset, values, width=0.26, label=label)
    axes.axhline(1.0, color="red", linestyle="--", linewidth=1, label="E4M3 range (448)")
    axes.set(xlabel="layer", ylabel="s · max|S| / 448", yscale="log", xticks=layers,
             title="Scaled attention logits after loading the trained checkpoint")
    axes.legend(fontsize=8)
    return figure
