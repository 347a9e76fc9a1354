"""Reproduction: PBS-Attn's block density against τ, with and without the key permutation, and prefill time.

Paper: PBS-Attn (arXiv 2510.21270); docs/papers/pbs_attn.md. Measured on structured random inputs
(`structured_qkv`: scattered heavy-hitter keys that hold most of every query's attention mass), no model:
1. density: the fraction of causal blocks PBS lists (computed blocks / N(N+1)/2) at each τ with and without the
   key permutation, and the output's max relative error against dense attention (T = budget.seq_len);
2. time: jitted dense causal attention (`jax.nn.dot_product_attention`, XLA) against jitted PBS (permutation +
   selection + the gather-based XLA block-sparse path) with a list budget `max_blocks` giving block density ρ;
   the median of `budget.steps` runs after one compile run, at each length of `lengths` (machine-dependent:
   the timing columns are volatile).

The budget: `seq_len` is the density table's T, `steps` the timing repeats, `batch_size` the rows of the inputs,
`seeds` the inputs' seeds (density rows per seed; timing on the first seed + 1).

    python -m icml26zoo.repro pbs_attn --out runs/repro/pbs_attn   # FULL: T = 4096, timing at 2048, 4096 (~5 CPU-min)
    python -m icml26zoo.repro pbs_attn --quick                     # T = 512
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from matplotlib.figure import Figure

from icml26zoo.longctx import pbs
from icml26zoo.repro.common import Budget, Experiment, Results, markdown_table
from icml26zoo.repro.registry import register_experiment
from icml26zoo.validation import check_int, check_interval

__all__ = ["DIM", "FULL", "HEADS", "KV_HEADS", "QUICK", "QUICK_ARGS", "SMOKE", "SMOKE_ARGS", "density_table", "run",
           "structured_qkv", "timing_table"]

DIM, HEADS, KV_HEADS = 64, 4, 2
# The page's run: density at T = 4096, timing at 2048 and 4096, median of 3 (block 64, segment 256).
FULL = Budget(steps=3, batch_size=1, seq_len=4096, seeds=(0,))
QUICK = Budget(steps=2, batch_size=1, seq_len=512, seeds=(0,))
QUICK_ARGS = {"lengths": (512,)}
# Every path (both permutation settings, a timing row) at the smallest size.
SMOKE = Budget(steps=1, batch_size=1, seq_len=64, seeds=(0,))
SMOKE_ARGS = {"lengths": (64,), "taus": (0.9,), "densities": (0.5,), "block": 16, "segment": 32}
TIMING = ("dense_s", "pbs_s", "ratio")


@register_experiment("pbs_attn", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, quick_args=QUICK_ARGS,
                     page="docs/papers/pbs_attn.md", volatile=TIMING)
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, taus: Sequence[float] = (0.8, 0.9, 0.95, 1.0),
        lengths: Sequence[int] = (2048, 4096), densities: Sequence[float] = (0.25, 0.5), block: int = 64,
        segment: int = 256, resume: bool = False) -> Results:
    """Measures the density table and the timing table; writes results.md/json and pbs_attn.png.

    Args:
      run_dir: where to write.
      budget: see the module docstring for what each field sizes.
      taus: kept pooled attention mass τ in (0, 1] of the density table.
      lengths: T of the timing table (each a multiple of `segment`).
      densities: block densities ρ in (0, 1] of the timing table's list budget.
      block, segment: PBS's block size and permutation segment (a multiple of `block`).
      resume: require run_dir to exist (the measurements are repeated; there is nothing to resume mid-way).
    """
    check_int("block", block)
    check_int("segment", segment)
    if segment % block:
        raise ValueError(f"segment must be a multiple of block {block}, got {segment}")
    taus, densities, lengths = tuple(taus), tuple(densities), tuple(lengths)
    for name, values in (("taus", taus), ("densities", densities), ("lengths", lengths)):
        if not values:
            raise ValueError(f"{name} must hold at least one value, got none")
    for value in taus:
        check_interval("taus[i]", value, 0, 1, closed="right")
    for value in densities:
        check_interval("densities[i]", value, 0, 1, closed="right")
    for length in (*lengths, budget.seq_len):
        check_int("lengths[i] and budget.seq_len", length, minimum=segment)
        if length % segment:
            raise ValueError(f"lengths[i] and budget.seq_len must be multiples of segment {segment}, got {length}")
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    density = [{"seed": seed, **row} for seed in budget.seeds
               for row in density_table(budget.seq_len, block, segment, taus, seed=seed, batch=budget.batch_size)]
    timing = timing_table(lengths, densities, block, segment, budget.steps, seed=budget.seeds[0] + 1,
                          batch=budget.batch_size)
    notes = [
        f"Block {block}, segment {segment}, H = {HEADS} query heads on Hkv = {KV_HEADS}, D = {DIM}, batch "
        f"{budget.batch_size}. Density: computed blocks / causal blocks at T = {budget.seq_len}; error = "
        "max|PBS − dense| / max|dense|.", "",
        f"## Prefill time (jitted, median of {budget.steps} after a compile run; machine-dependent)", "",
        "dense = jax.nn.dot_product_attention(is_causal=True); PBS = permutation + selection + the gather-based XLA "
        "block-sparse path with max_blocks = round(ρ·(N + 1)/2) slots (at least a segment plus one).", "",
        *markdown_table(timing, ("length", "rho", "max_blocks", *TIMING)), "",
        "## Block density against τ", "",
    ]
    return experiment.write(density, columns=("seed", "tau", "permute", "density", "error"), notes=notes,
                            figures={"pbs_attn": _figure(density, timing)}, extra={"timing": timing},
                            title="PBS-Attn: block density with and without the permutation, and prefill time")


def structured_qkv(seed: int, length: int, heavy: float = 0.02,
                   strength: float = 8.0, batch: int = 1) -> tuple[jax.Array, jax.Array, jax.Array]:
    """q [B, T, H, D], k, v [B, T, Hkv, D] with scattered heavy-hitter keys: every query and a `heavy`
    fraction of the keys (at random positions) share a direction u with norm `strength`; the rest is unit
    noise. Most of every query's attention mass then sits on few keys spread over the whole sequence: the
    case PBS's permutation is built for (without it almost every block holds a heavy hitter)."""
    rng = np.random.default_rng(seed)
    u = rng.standard_normal(DIM)
    u *= strength / np.linalg.norm(u)
    q = u + rng.standard_normal((batch, length, HEADS, DIM))
    is_heavy = rng.random((batch, length, KV_HEADS, 1)) < heavy
    k = np.where(is_heavy, u, 0.0) + rng.standard_normal((batch, length, KV_HEADS, DIM))
    v = rng.standard_normal((batch, length, KV_HEADS, DIM))
    return tuple(jnp.asarray(x, jnp.float32) for x in (q, k, v))


def _dense(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    return jax.nn.dot_product_attention(q, k, v, is_causal=True)


def _median_seconds(fn: Callable[..., jax.Array], *args: jax.Array, repeats: int) -> float:
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def density_table(length: int, block: int, segment: int, taus: tuple[float, ...], *, seed: int = 0,
                  batch: int = 1) -> list[dict]:
    """Rows {tau, permute, density, error}: error = max|PBS − dense| / max|dense|."""
    q, k, v = structured_qkv(seed, length, batch=batch)
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
                 repeats: int, *, seed: int = 1, batch: int = 1) -> list[dict]:
    """Rows {length, rho, max_blocks, dense_s, pbs_s, ratio}."""
    rows = []
    for length in lengths:
        q, k, v = structured_qkv(seed, length, batch=batch)
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


def _figure(density_rows: list[dict], timing_rows: list[dict]) -> Figure:
    """Left: block density against τ with and without the permutation (first seed); right: PBS / dense time."""
    figure = Figure(figsize=(10.0, 3.8), layout="constrained")
    left, right = figure.subplots(1, 2)
    first = density_rows[0]["seed"]
    for permute, style in ((True, "o-"), (False, "s--")):
        rows = [r for r in density_rows if r["permute"] == permute and r["seed"] == first]
        left.plot([r["tau"] for r in rows], [r["density"] for r in rows], style,
                  label="permuted keys" if permute else "no permutation")
    left.set(xlabel="τ (kept pooled attention mass)", ylabel="block density (computed / causal blocks)",
             title="PBS block density, structured input")
    left.legend()
    labels = [f"T={r['length']}\nρ={r['rho']}" for r in timing_rows]
    right.bar(labels, [r["ratio"] for r in timing_rows], color="tab:blue", label="PBS / dense time")
    right.plot(labels, [r["rho"] + 0.15 for r in timing_rows], "k_", markersize=30, label="C6 bound ρ + 0.15")
    right.set(ylabel="time ratio (XLA)", title="Prefill time with permutation + selection")
    right.legend()
    return figure
