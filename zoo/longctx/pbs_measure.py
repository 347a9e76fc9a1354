"""CPU measurements of PBS-Attn for docs/papers/pbs_attn.md: block density against τ, and prefill time.

    python -m icml26zoo.longctx.pbs_measure --out docs/papers/img/pbs_attn.png

1. Density: the fraction of causal blocks PBS lists (computed blocks / N(N+1)/2) at τ ∈ {0.8, 0.9, 0.95, 1}
   with and without the key permutation, on structured random inputs (`structured_qkv`: scattered
   heavy-hitter keys that hold most of every query's attention mass).
2. Time: jitted dense causal attention (`jax.nn.dot_product_attention`, XLA) against jitted PBS
   (permutation + selection + the gather-based XLA block-sparse path) with a list budget `max_blocks`
   giving block density ρ ∈ {0.25, 0.5}; the median of a few runs, after one compile run.
"""

from __future__ import annotations

import argparse
import functools
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.longctx import pbs

DIM, HEADS, KV_HEADS = 64, 4, 2


def structured_qkv(seed: int, length: int, heavy: float = 0.02,
                   strength: float = 8.0) -> tuple[jax.Array, jax.Array, jax.Array]:
    """q [1, T, H, D], k, v [1, T, Hkv, D] with scattered heavy-hitter keys: every query and a `heavy`
    fraction of the keys (at random positions) share a direction u with norm `strength`; the rest is unit
    noise. Most of every query's attention mass then sits on few keys spread over the whole sequence: the
    case PBS's permutation is built for (without it almost every block holds a heavy hitter)."""
    rng = np.random.default_rng(seed)
    u = rng.standard_normal(DIM)
    u *= strength / np.linalg.norm(u)
    q = u + rng.standard_normal((length, HEADS, DIM))
    is_heavy = rng.random((length, KV_HEADS, 1)) < heavy
    k = np.where(is_heavy, u, 0.0) + rng.standard_normal((length, KV_HEADS, DIM))
    v = rng.standard_normal((length, KV_HEADS, DIM))
    return tuple(jnp.asarray(x[None], jnp.float32) for x in (q, k, v))


def _dense(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    return jax.nn.dot_product_attention(q, k, v, is_causal=True)


def _median_seconds(fn, *args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def density_table(length: int, block: int, segment: int, taus: tuple[float, ...]) -> list[dict]:
    """Rows {tau, permute, density, error}: error = max|PBS − dense| / max|dense|."""
    q, k, v = structured_qkv(0, length)
    want = _dense(q, k, v)
    rows = []
    for permute in (True, False):
        run = jax.jit(functools.partial(pbs.pbs_prefill, block_size=block, segment_size=segment, permute=permute,
                                        return_plan=True), static_argnames=("tau",))
        for tau in taus:
            out, plan = run(q, k, v, tau=tau)
            err = float(jnp.max(jnp.abs(out - want)) / jnp.max(jnp.abs(want)))
            rows.append({"tau": tau, "permute": permute, "density": float(plan.density), "error": err})
    return rows


def timing_table(lengths: tuple[int, ...], densities: tuple[float, ...], block: int, segment: int,
                 repeats: int) -> list[dict]:
    """Rows {length, rho, max_blocks, dense_s, pbs_s, ratio}."""
    rows = []
    for length in lengths:
        q, k, v = structured_qkv(1, length)
        dense_s = _median_seconds(jax.jit(_dense), q, k, v, repeats=repeats)
        n = -(-length // block)
        for rho in densities:
            slots = max(segment // block + 1, round(rho * (n + 1) / 2))
            run = jax.jit(functools.partial(pbs.pbs_prefill, tau=0.9, block_size=block, segment_size=segment,
                                            max_blocks=slots))
            pbs_s = _median_seconds(run, q, k, v, repeats=repeats)
            rows.append({"length": length, "rho": rho, "max_blocks": slots, "dense_s": dense_s, "pbs_s": pbs_s,
                         "ratio": pbs_s / dense_s})
    return rows


def plot(density_rows: list[dict], timing_rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for permute, style in ((True, "o-"), (False, "s--")):
        rows = [r for r in density_rows if r["permute"] == permute]
        left.plot([r["tau"] for r in rows], [r["density"] for r in rows], style,
                  label="permuted keys" if permute else "no permutation")
    left.set_xlabel("τ (kept pooled attention mass)")
    left.set_ylabel("block density (computed / causal blocks)")
    left.legend()
    left.set_title("PBS block density, structured input")
    labels = [f"T={r['length']}\nρ={r['rho']}" for r in timing_rows]
    right.bar(labels, [r["ratio"] for r in timing_rows], color="tab:blue", label="PBS / dense time")
    right.plot(labels, [r["rho"] + 0.15 for r in timing_rows], "k_", markersize=30, label="C6 bound ρ + 0.15")
    right.set_ylabel("time ratio (CPU, XLA)")
    right.legend()
    right.set_title("Prefill time with permutation + selection")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="PNG path of the figure (none: no figure)")
    parser.add_argument("--lengths", default="2048,4096")
    parser.add_argument("--density-length", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    block, segment = 64, 256
    dens = density_table(args.density_length, block, segment, (0.8, 0.9, 0.95, 1.0))
    timing = timing_table(tuple(int(x) for x in args.lengths.split(",")), (0.25, 0.5), block, segment, args.repeats)
    print(f"machine: {platform.processor() or platform.machine()}, jax {jax.__version__}, "
          f"backend {jax.default_backend()}, block {block}, segment {segment}, H {HEADS}/Hkv {KV_HEADS}, D {DIM}")
    print("| τ | permutation | block density | max rel. error vs dense |\n|---|---|---|---|")
    for r in dens:
        print(f"| {r['tau']} | {'yes' if r['permute'] else 'no'} | {r['density']:.3f} | {r['error']:.2e} |")
    print("| T | ρ | max_blocks | dense (s) | PBS (s) | PBS / dense |\n|---|---|---|---|---|---|")
    for r in timing:
        print(f"| {r['length']} | {r['rho']} | {r['max_blocks']} | {r['dense_s']:.3f} | {r['pbs_s']:.3f} | "
              f"{r['ratio']:.2f} |")
    if args.out:
        plot(dens, timing, args.out)


if __name__ == "__main__":
    main()
