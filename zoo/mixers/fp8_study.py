"""A small measurement of rank-aware FP8 logit scaling on a trained zoo LM (docs/papers/fp8_rank_aware.md).

Scenario (the paper's "loading pretrained weights" transient): a delayed-scaling (amax) recipe calibrated its
per-layer scale on the logits of the freshly initialised model; then the trained checkpoint is loaded. For
each attention layer of the trained model, on held-out text, the study reports the largest logit, how many
logits overflow E4M3 with the stale amax scale and with the rank-aware scale computed from the trained weights
(ρ = largest mixer-input norm of the batch; RoPE-safe factor ‖W_Q,h‖‖W_K,h‖), the rank-aware scale's use of
the range, the bounds (with σ_max(W_Q W_Kᵀ), which RoPE can exceed, and the RoPE-safe one), and the error of
the mixer's FP8-logit forward against its float32 forward.

    python -m icml26zoo.mixers.fp8_study --run <a trained attention-LM workdir> --out docs/papers/img
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26zoo.diagnostics import capture_forward
from icml26zoo.diagnostics.capture import unrolled
from icml26zoo.layers import fp8_scaling as f8
from icml26zoo.mixers.attention import Attention
from icml26zoo.models import build_model

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["layer_rows", "main"]


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
    # matplotlib belongs to the [train] extra; the zoo's core modules import without it.
    from matplotlib.figure import Figure

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


def main(argv: Sequence[str] | None = None) -> None:
    from icml26zoo.train import load_run
    from icml26zoo.train.data import make_eval_iterator

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="workdir of a trained attention LM (config + checkpoint)")
    parser.add_argument("--out", default=".", help="folder for fp8_transient.png")
    parser.add_argument("--headroom", type=float, default=0.8)
    args = parser.parse_args(argv)
    config, trained, _ = load_run(args.run, devices=jax.devices()[:1])
    initial = build_model(config.model, rngs=nnx.Rngs(config.seed))
    batch = next(iter(make_eval_iterator(config.data, batch_size=4, seq_len=config.seq_len)))
    rows = layer_rows(initial, trained, jnp.asarray(batch["inputs"]), args.headroom)
    columns = list(rows[0])
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(f"{row[c]:.4g}" if isinstance(row[c], float) else str(row[c]) for c in columns) + " |")
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    _figure(rows).savefig(out / "fp8_transient.png", dpi=100)
    print(f"figure: {out / 'fp8_transient.png'}")


if __name__ == "__main__":
    main()
