"""Reproduction: rank-aware FP8 (E4M3) attention-logit scaling on a trained zoo LM, the checkpoint-load transient.

Paper: Emadi, "Rank-Aware Spectral Bounds on Attention Logits for Stable Low-Precision Training" (ICML 2026,
arXiv 2602.18851); docs/papers/fp8_rank_aware.md. The scenario is the paper's "loading pretrained weights"
transient: a delayed-scaling (amax) recipe calibrated its per-layer scale on the logits of the freshly initialised
model; then the trained checkpoint is loaded. The tiny attention LM (2 layers, d_model 64, 4 heads / 2 KV heads,
RoPE; the YAQA experiment's cell) is trained by the shared trainer on the byte corpus, once per seed. For each
attention layer of the trained model, on `eval_rows` held-out rows, it reports the largest logit, how many logits
overflow E4M3 with the stale amax scale and with the rank-aware scale computed from the trained weights
(ρ = the largest mixer-input norm of the batch; RoPE-safe factor ‖W_Q,h‖‖W_K,h‖), the rank-aware scale's use
of the range, the bounds (with σ_max(W_Q W_Kᵀ), which RoPE can exceed, and the RoPE-safe one), and the error
of the mixer's FP8-logit forward against its float32 forward.

    python -m icml26zoo.repro fp8_rank_aware --out runs/repro/fp8_rank_aware   # FULL: 400 steps of 16 x 64 bytes
    python -m icml26zoo.repro fp8_rank_aware --quick                          # 20 steps
"""

from __future__ import annotations

import dataclasses
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
from icml26zoo.models import build_model
from icml26zoo.repro.common import Budget, Experiment, Results
from icml26zoo.repro.registry import register_experiment
from icml26zoo.repro.stored import stored
from icml26zoo.train import load_run
from icml26zoo.train.config import TrainConfig
from icml26zoo.train.data import make_eval_iterator
from icml26zoo.train.presets import tiny_byte_lm
from icml26zoo.validation import check_int, check_interval

__all__ = ["FULL", "QUICK", "SMOKE", "SMOKE_ARGS", "layer_rows", "run"]

# The page's run: the YAQA experiment's LM cell, 400 steps of 16 x 64 bytes, seed 0; 4 held-out rows of 64 bytes.
FULL = Budget(steps=400, batch_size=16, seq_len=64, seeds=(0,))
QUICK = Budget(steps=20, batch_size=4, seq_len=32, seeds=(0,))
# Every stage (training, both scales, the FP8 forward, the figure) on 2 steps and one held-out row.
SMOKE = Budget(steps=2, batch_size=2, seq_len=16, seeds=(0,))
SMOKE_ARGS = {"eval_rows": 1}
COLUMNS = ("seed", "layer", "max_abs_logit", "amax_scale_at_init", "overflow_amax", "rank_aware_scale_min",
           "overflow_rank_aware", "logits", "utilization", "max_over_sigma_bound", "max_over_rope_bound",
           "fp8_rel_error")


@register_experiment("fp8_rank_aware", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     page="docs/papers/fp8_rank_aware.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, headroom: float = 0.8, eval_rows: int = 4,
        resume: bool = False) -> Results:
    """Trains the LM per seed and measures every layer's scaled logits after the load; writes results.md/json and
    fp8_transient.png.

    Args:
      run_dir: the experiment's directory (cells, the byte corpus, results).
      budget: steps, batch size, row length and seeds of the LM (the held-out rows have the same length).
      headroom: u in (0, 1]: both scales aim the largest logit at u · 448.
      eval_rows: held-out rows the logits are measured on (>= 1).
      resume: require run_dir to exist; finished cells are reused either way.
    """
    check_interval("headroom", headroom, 0, 1, closed="right")
    check_int("eval_rows", eval_rows)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    config = _config(experiment)
    devices = jax.devices()[:1]
    rows = []
    for seed in budget.seeds:
        cell = f"lm_seed{seed}"
        experiment.train_cell(cell, experiment.cell_config(config, seed=seed, checkpoints=1), devices=devices)

        def measure(cell: str = cell) -> list[dict]:
            cell_config, trained, _ = load_run(experiment.cell_dir(cell), devices=devices)
            initial = build_model(cell_config.model, rngs=nnx.Rngs(cell_config.seed))
            batch = next(iter(make_eval_iterator(cell_config.data, batch_size=eval_rows, seq_len=budget.seq_len)))
            return layer_rows(initial, trained, jnp.asarray(batch["inputs"]), headroom)

        # Kept in the cell: a resumed run reuses a finished measurement as it reuses the trained cell.
        layers = stored(experiment.cell_dir(cell) / "fp8_layers.json", {"headroom": headroom, "eval_rows": eval_rows},
                        measure)
        rows += [{"seed": seed, **row} for row in layers]
    notes = [
        f"Model: the tiny attention LM (2 layers, d_model 64, 4 heads / 2 KV heads, RoPE) trained by the shared "
        f"trainer on the byte corpus. The amax scale (headroom {headroom:g}) is calibrated on the freshly "
        f"initialised model's logits; then the trained checkpoint is loaded and the logits are measured on "
        f"{eval_rows} held-out row(s) of {budget.seq_len} bytes.",
        "overflow_*: logits an E4M3 cast loses (|s·S| > 448, NaN); utilization = s · max|S| / 448 of the rank-aware "
        "scale; max_over_*_bound: max|S| over the deterministic bound with σ_max(W_Q W_Kᵀ) and with the RoPE-safe "
        "‖W_Q‖‖W_K‖; fp8_rel_error: max |FP8-logit mixer − float32 mixer| / max |float32 mixer|.",
    ]
    return experiment.write(rows, columns=COLUMNS, notes=notes, figures={"fp8_transient": _figure(rows)},
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


def layer_rows(initial: nnx.Module, trained: nnx.Module, tokens: jax.Array, headroom: float = 0.8) -> list[dict]:
    """One row per layer of two attention LMs of one config: the amax scale of `initial`'s logits applied to
    `trained`'s, against the rank-aware scale of `trained`'s weights. tokens [B, T]."""
    before, after = unrolled(initial), unrolled(trained)
    inputs_before = capture_forward(before, tokens, materialize_attention=False)["mixer_in"]
    inputs_after = capture_forward(after, tokens, materialize_attention=False)["mixer_in"]
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
    cfg = trained.cfg
    rows = []
    for index, (old, new) in enumerate(zip(before.layers, after.layers, strict=True)):
        mixer = new.mixer
        naive = f8.amax_scale(old.mixer.attention_logits(inputs_before[index], positions=positions), headroom)
        x = inputs_after[index]
        logits = mixer.attention_logits(x, positions=positions)
        fp8_cfg = dataclasses.replace(cfg, mixer_options=(*cfg.mixer_options, ("fp8_logits", "rank_aware"),
                                                          ("fp8_headroom", headroom)))
        fp8_mixer = Attention(fp8_cfg, rngs=nnx.Rngs(0))
        nnx.update(fp8_mixer, nnx.state(mixer, nnx.Param))
        scales = fp8_mixer.fp8_scales(x)
        exact, _ = mixer(x, positions=positions)
        approx, _ = fp8_mixer(x, positions=positions)
        rho = float(jnp.max(jnp.linalg.norm(x, axis=-1)))
        args = (mixer.q_proj.kernel[...], mixer.k_proj.kernel[...], cfg.num_heads, cfg.num_kv_heads, 50)
        sigma_bound = f8.deterministic_bound(f8.head_sigmas(*args), rho, rho, mixer.head_dim)
        rope_bound = f8.deterministic_bound(f8.head_norm_products(*args), rho, rho, mixer.head_dim)
        per_head_max = jnp.max(jnp.abs(_masked(logits)), axis=(0, 2, 3))
        rows.append({
            "layer": index,
            "max_abs_logit": _finite_abs_max(logits),
            "amax_scale_at_init": float(naive),
            "overflow_amax": int(f8.overflow_count(_masked(logits), naive)),
            "rank_aware_scale_min": float(jnp.min(scales)),
            "overflow_rank_aware": int(f8.overflow_count(_masked(logits), scales[None, :, None, None])),
            "logits": int(jnp.sum(jnp.isfinite(logits))),
            "utilization": float(jnp.max(per_head_max * scales) / f8.E4M3_MAX),
            "max_over_sigma_bound": float(jnp.max(per_head_max / sigma_bound)),
            "max_over_rope_bound": float(jnp.max(per_head_max / rope_bound)),
            "fp8_rel_error": float(jnp.max(jnp.abs(approx - exact)) / jnp.max(jnp.abs(exact))),
        })
    return rows


def _figure(rows: list[dict]) -> Figure:
    """The first seed's scaled largest logit per layer, stale amax scale vs rank-aware scale."""
    rows = [r for r in rows if r["seed"] == rows[0]["seed"]]
    figure = Figure(figsize=(6.5, 3.8), layout="constrained")
    axes = figure.add_subplot()
    layers = np.arange(len(rows))
    naive = [r["max_abs_logit"] * r["amax_scale_at_init"] / f8.E4M3_MAX for r in rows]
    aware = [r["utilization"] for r in rows]
    axes.bar(layers - 0.18, naive, width=0.36, label="amax scale from init (stale)")
    axes.bar(layers + 0.18, aware, width=0.36, label="rank-aware scale (trained weights)")
    axes.axhline(1.0, color="red", linestyle="--", linewidth=1, label="E4M3 range (448)")
    axes.set(xlabel="layer", ylabel="s · max|S| / 448", yscale="log", xticks=layers,
             title="Scaled attention logits after loading the trained checkpoint")
    axes.legend(fontsize=8)
    return figure
