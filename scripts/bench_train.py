"""Training-step throughput, CPU "MFU" and scan compile scaling (docs/performance.md goals C7 and C8).

    python scripts/bench_train.py [--out bench_out] [--steps 10]

C8: tokens/s of the default preset's jitted train step on random byte batches (the input pipeline is
not timed), and MFU = MaxText training FLOPs / the f32 matmul rate measured in this same run.
C7: XLA compile time of value_and_grad of a d=512, 8-head, T=256 LM with scan over layers and remat, at
12 and 24 layers. Writes bench_train.{json,md,png} to --out and exits 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from icml26zoo.configs import load_preset  # noqa: E402
from icml26zoo.losses import weighted_cross_entropy  # noqa: E402
from icml26zoo.models import build_model  # noqa: E402
from icml26zoo.models.config import ModelConfig  # noqa: E402
from icml26zoo.train.batch_source import batch_from_tokens  # noqa: E402
from icml26zoo.train.flops import mesh_peak_flops, train_flops_per_token  # noqa: E402
from icml26zoo.train.runs import build_run  # noqa: E402
from icml26zoo.train.sharding import global_batch  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
GOALS = {"mfu_min": 0.25, "compile_12_max_s": 5.0, "compile_ratio_max": 1.3}


def random_batch(batch_size: int, seq_len: int, vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return batch_from_tokens(rng.integers(0, vocab, size=(batch_size, seq_len + 1), dtype=np.int32))


def bench_step(steps: int) -> dict[str, float]:
    """Median-free min-of-windows timing of the default preset's train step; returns tokens/s and MFU."""
    config = load_preset(ROOT / "configs" / "default.py")
    run, state = build_run(config)
    batch = global_batch(run.mesh, random_batch(config.batch_size, config.seq_len, config.model.vocab_size))
    for _ in range(2):
        state, metrics = run.train_step(state, batch)
    jax.block_until_ready(metrics)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(steps):
            state, metrics = run.train_step(state, batch)
        jax.block_until_ready(metrics)
        times.append((time.perf_counter() - start) / steps)
    step_time = min(times)
    matmul = mesh_peak_flops(run.mesh.devices.flat, "float32")
    flops = train_flops_per_token(config.model, config.seq_len) * config.batch_size * config.seq_len
    return {
        "step_time_s": step_time,
        "tokens_per_s": config.batch_size * config.seq_len / step_time,
        "model_gflop_per_s": flops / step_time / 1e9,
        "matmul_gflop_per_s": matmul / 1e9,
        "mfu": flops / step_time / matmul,
    }


def compile_seconds(num_layers: int) -> float:
    """Wall time of lowering + compiling value_and_grad of the C7 model with `num_layers` layers."""
    cfg = ModelConfig(
        d_model=512, num_heads=8, num_kv_heads=8, num_layers=num_layers, scan_layers=True, remat=True, max_seq_len=256
    )
    graphdef, params = nnx.split(nnx.eval_shape(lambda: build_model(cfg, rngs=nnx.Rngs(0))), nnx.Param)
    params = nnx.to_pure_dict(params)
    batch = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), random_batch(8, 256, cfg.vocab_size))

    def loss(p, b):
        logits = nnx.merge(graphdef, p)(b["inputs"], segment_ids=b["segment_ids"], positions=b["positions"])
        total, weight, _ = weighted_cross_entropy(logits, b["targets"], b["weights"])
        return total / weight

    start = time.perf_counter()
    jax.jit(jax.value_and_grad(loss)).lower(params, batch).compile()
    return time.perf_counter() - start


def evaluate_goals(results: dict) -> list[str]:
    misses = []
    if results["step"]["mfu"] < GOALS["mfu_min"]:
        misses.append(f"C8: MFU {results['step']['mfu']:.1%} < {GOALS['mfu_min']:.0%}")
    if results["compile"]["12_layers_s"] > GOALS["compile_12_max_s"]:
        misses.append(f"C7: 12-layer compile {results['compile']['12_layers_s']:.2f} s > {GOALS['compile_12_max_s']} s")
    if results["compile"]["ratio_24_over_12"] > GOALS["compile_ratio_max"]:
        misses.append(f"C7: compile ratio {results['compile']['ratio_24_over_12']:.2f} > {GOALS['compile_ratio_max']}")
    return misses


def write_outputs(results: dict, misses: list[str], out: pathlib.Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_train.json").write_text(json.dumps({**results, "misses": misses}, indent=2))
    step, comp = results["step"], results["compile"]
    table = "\n".join([
        "| measurement | value | goal |",
        "|---|---|---|",
        f"| train step (default preset) | {step['step_time_s'] * 1e3:.1f} ms, "
        f"{step['tokens_per_s']:,.0f} tokens/s | - |",
        f"| f32 matmul rate, same run | {step['matmul_gflop_per_s']:.0f} GFLOP/s | - |",
        f"| C8 MFU (MaxText FLOPs / matmul rate) | {step['mfu']:.1%} | >= {GOALS['mfu_min']:.0%} |",
        f"| C7 compile, 12 layers (scan + remat) | {comp['12_layers_s']:.2f} s | <= {GOALS['compile_12_max_s']} s |",
        f"| C7 compile, 24 layers | {comp['24_layers_s']:.2f} s | - |",
        f"| C7 compile ratio 24 / 12 | {comp['ratio_24_over_12']:.2f} | <= {GOALS['compile_ratio_max']} |",
    ])
    (out / "bench_train.md").write_text(table + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
    ax1.bar(["model", "matmul peak"], [step["model_gflop_per_s"], step["matmul_gflop_per_s"]])
    ax1.set_ylabel("GFLOP/s")
    ax1.set_title(f"train step MFU {step['mfu']:.1%}")
    ax2.bar(["12 layers", "24 layers"], [comp["12_layers_s"], comp["24_layers_s"]])
    ax2.set_ylabel("compile seconds")
    ax2.set_title(f"scan compile ratio {comp['ratio_24_over_12']:.2f}")
    fig.tight_layout()
    fig.savefig(out / "bench_train.png", dpi=100)
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench_out", help="directory for JSON, markdown and PNG")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per window")
    args = parser.parse_args()
    jnp.zeros(()).block_until_ready()
    # A first compile warms up JAX's tracing machinery so it is not billed to the 12-layer model; each
    # depth is compiled once because repeated identical compiles may hit JAX's in-process caches.
    compile_seconds(2)
    compile_12 = compile_seconds(12)
    compile_24 = compile_seconds(24)
    results = {
        "backend": jax.default_backend(),
        "devices": len(jax.devices()),
        "step": bench_step(args.steps),
        "compile": {"12_layers_s": compile_12, "24_layers_s": compile_24, "ratio_24_over_12": compile_24 / compile_12},
        "config": dataclasses.asdict(load_preset(ROOT / "configs" / "default.py").model),
    }
    misses = evaluate_goals(results)
    print(write_outputs(results, misses, pathlib.Path(args.out)))
    for miss in misses:
        print("MISSED", miss)
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
