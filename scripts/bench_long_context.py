"""Long-context benchmark on CPU (issue 19): PBS-Attn speed (goal C6), HARD-KV decode memory, and retrieval
accuracy against cost of PBS-Attn, HARD-KV and ISA against dense attention.

    python scripts/bench_long_context.py [--out bench_out] [--quick] [--repeats 3] [--lengths 4096 8192]

Sections, all in one process (ratios are taken inside the run):
  C6        forward time of PBS-Attn prefill (key permutation and block selection included, through the
            block-sparse XLA op) over the zoo's dense causal attention (the blocked plain path of
            kernels/forgetting_attention/xla.py), at block densities 0.25 and 0.5, T = 4096, block 128
            (--quick: T = 1024, block 64); goal t(PBS) / t(dense) ≤ ρ + 0.15. Min of --repeats interleaved
            runs after a warmup. On CPU this measures the XLA path, not a GPU kernel.
  memory    decode cache bytes per token of one attention layer (H = 8 KV heads, D = 128, bf16, 16k tokens)
            for HARD-KV at budgets 0.1, 0.25 and 0.5 against the full cache (shapes only).
  retrieval the needle-in-a-haystack task of icml26zoo.longctx.needle (stdlib bytes, 8 needles of 16 tokens,
            questions at the end; H = 2, D = 64) at T = 4096, 8192, 16384 (--quick: 1024): accuracy, agreement
            with dense attention's answers, relative error at the questions, and the cost of each method as a
            fraction of dense attention (PBS: key blocks computed; HARD-KV: cache rows kept; ISA: FLOPs).
Writes bench_long_context.{json,md,png} to --out and exits 1 when a C6 goal is missed (--quick has no goal).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from icml26zoo.longctx import hard_kv  # noqa: E402
from icml26zoo.longctx.compare import HARD_KV_BUDGETS, HARD_KV_INTERVAL, dense_causal, retrieval_rows  # noqa: E402
from icml26zoo.longctx.pbs import pbs_prefill  # noqa: E402
from icml26zoo.repro.needle import needle_task  # noqa: E402

C6_SLACK = 0.15
DENSITIES = (0.25, 0.5)
MEMORY_SHAPE = {"kv_heads": 8, "heads": 32, "head_dim": 128, "tokens": 16384}


def _timed(fns: dict, args: tuple, repeats: int) -> dict[str, float]:
    """{name: min seconds} of jitted fns on the same args, warmed up, repeats interleaved round-robin."""
    compiled = {name: jax.jit(fn).lower(*args).compile() for name, fn in fns.items()}
    for fn in compiled.values():
        jax.block_until_ready(fn(*args))
    best = dict.fromkeys(compiled, math.inf)
    for _ in range(repeats):
        for name, fn in compiled.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(*args))
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def pbs_at_density(rho: float, block: int, length: int, return_plan: bool = False):
    """PBS prefill (τ = 0.95, segment 2·block) whose lists hold at most ρ·(N + 1)/2 key blocks per query block,
    the mean causal list length times ρ (at least the 3 blocks of the own segment and the sink)."""
    cap = max(3, round(rho * (length // block + 1) / 2))
    return lambda q, k, v: pbs_prefill(q, k, v, tau=0.95, block_size=block, segment_size=2 * block,
                                       max_blocks=cap, return_plan=return_plan)


def c6_rows(length: int, block: int, repeats: int, goal: bool) -> list[dict]:
    """PBS prefill time over dense attention at each density (B1 H4 D64 f32)."""
    rng = np.random.default_rng(length)
    q, k, v = (jnp.asarray(rng.normal(size=(1, length, 4, 64)), jnp.float32) for _ in range(3))
    fns = {"dense": dense_causal}
    fns.update({f"pbs_{rho}": pbs_at_density(rho, block, length) for rho in DENSITIES})
    seconds = _timed(fns, (q, k, v), repeats)
    rows = []
    for rho in DENSITIES:
        ratio = seconds[f"pbs_{rho}"] / seconds["dense"]
        bound = rho + C6_SLACK if goal else None
        rows.append({"check": f"C6 PBS/dense T={length} block={block} density={rho}", "ratio": ratio,
                     "listed_density": float(pbs_at_density(rho, block, length, True)(q, k, v)[1].density),
                     "pbs_ms": seconds[f"pbs_{rho}"] * 1e3, "dense_ms": seconds["dense"] * 1e3, "goal": bound,
                     "ok": bound is None or ratio <= bound})
    return rows


def memory_rows() -> list[dict]:
    """Bytes per cached token of one layer: full cache vs HARD-KV at each budget (shapes only)."""
    s = MEMORY_SHAPE
    full = 2 * s["kv_heads"] * s["head_dim"] * jnp.dtype(jnp.bfloat16).itemsize
    rows = [{"cache": "full", "bytes_per_token": float(full), "ratio": 1.0}]
    for budget in HARD_KV_BUDGETS:
        per_token = hard_kv_bytes_per_token(budget, s)
        rows.append({"cache": f"HARD-KV budget {budget}", "bytes_per_token": per_token, "ratio": per_token / full})
    return rows


def hard_kv_bytes_per_token(budget: float, s: dict) -> float:
    """Bytes of one layer's HARD-KV cache (every array: K/V rows, masks, positions, query window) per token."""
    config = hard_kv.HardKVConfig(budget=budget, interval=HARD_KV_INTERVAL)
    rows = hard_kv.cache_rows(config, s["tokens"])
    shapes = jax.eval_shape(lambda: hard_kv.init_layer_cache(1, s["heads"], s["kv_heads"], s["head_dim"], rows,
                                                             config.window, jnp.ones(s["kv_heads"]), jnp.bfloat16))
    total = sum(np.dtype(x.dtype).itemsize * math.prod(x.shape) for x in jax.tree.leaves(shapes))
    return total / s["tokens"]


def to_markdown(c6: list[dict], memory: list[dict], retrieval: list[dict]) -> str:
    lines = ["| check | PBS ms | dense ms | ratio | goal | ok |", "|---|---|---|---|---|---|"]
    for r in c6:
        goal = "—" if r["goal"] is None else f"≤ {r['goal']:.2f}"
        lines.append(f"| {r['check']} | {r['pbs_ms']:.1f} | {r['dense_ms']:.1f} | {r['ratio']:.2f} | {goal} | "
                     f"{'yes' if r['ok'] else 'NO'} |")
    lines += ["", "| decode cache (one layer, 8 KV heads, D 128, bf16) | bytes per token | vs full |", "|---|---|---|"]
    lines += [f"| {r['cache']} | {r['bytes_per_token']:.0f} | {r['ratio']:.3f} |" for r in memory]
    lines += ["", "| T | method | cost vs dense | needle accuracy | agrees with dense | rel. error at questions |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {r['T']} | {r['method']} | {r['cost']:.3f} | {r['accuracy']:.3f} | {r['agree_with_dense']:.3f} | "
              f"{r['rel_error']:.3f} |" for r in retrieval]
    return "\n".join(lines) + "\n"


def plot(retrieval: list[dict], path: pathlib.Path) -> None:
    """Needle accuracy against cost, one panel per T, one marker per method family."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths = sorted({r["T"] for r in retrieval})
    fig, axes = plt.subplots(1, len(lengths), figsize=(4.5 * len(lengths), 3.8), squeeze=False)
    for ax, length in zip(axes[0], lengths, strict=True):
        for family, marker in (("PBS", "o"), ("HARD-KV", "s"), ("ISA", "^")):
            rows = [r for r in retrieval if r["T"] == length and r["method"].startswith(family)]
            ax.scatter([r["cost"] for r in rows], [r["accuracy"] for r in rows], marker=marker, s=50, label=family)
        ax.axhline(1.0, color="grey", lw=0.8, ls="--", label="dense")
        ax.set(title=f"T = {length}", xlabel="cost (fraction of dense attention)", ylabel="needle accuracy",
               ylim=(-0.05, 1.05))
    axes[0][0].legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench_out")
    parser.add_argument("--quick", action="store_true", help="T = 1024 for C6 (no goal) and retrieval")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lengths", type=int, nargs="+", default=None,
                        help="retrieval lengths (default 4096 8192 16384; --quick: 1024)")
    args = parser.parse_args()
    c6_length, c6_block = (1024, 64) if args.quick else (4096, 128)
    lengths = args.lengths or ((1024,) if args.quick else (4096, 8192, 16384))
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    c6 = c6_rows(c6_length, c6_block, args.repeats, goal=not args.quick)
    memory, retrieval = memory_rows(), []
    write(out, args.quick, c6, memory, retrieval)
    for length in lengths:
        retrieval += retrieval_rows(needle_task(length))
        print(f"retrieval T={length} done", flush=True)
        # written after every length, so a long run that is stopped keeps what it measured
        write(out, args.quick, c6, memory, retrieval)
    print(to_markdown(c6, memory, retrieval))
    return 0 if all(r["ok"] for r in c6) else 1


def write(out: pathlib.Path, quick: bool, c6: list[dict], memory: list[dict], retrieval: list[dict]) -> None:
    """bench_long_context.{json,md} (and the PNG once there are retrieval rows) under `out`."""
    payload = {"backend": jax.default_backend(), "quick": quick, "c6": c6, "memory": memory, "retrieval": retrieval}
    (out / "bench_long_context.json").write_text(json.dumps(payload, indent=2))
    (out / "bench_long_context.md").write_text(to_markdown(c6, memory, retrieval))
    if retrieval:
        plot(retrieval, out / "bench_long_context.png")


if __name__ == "__main__":
    sys.exit(main())
