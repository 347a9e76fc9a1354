"""SSD benchmark on CPU: chunked vs recurrent, scalar vs diagonal, scaling in T (docs/performance.md C0-C3, C5).

    python scripts/bench_ssm.py [--out bench_out] [--repeats 3] [--skip-pallas]

All numbers come from one process, float32, min of --repeats timed runs after a warmup; only ratios
measured side by side are goals (absolute CPU times are not):
- C0: Pallas (interpret) vs autodiff of the `lax.scan` recurrence (the pure-JAX reference), max-abs error
  of y, S and every gradient, T in {256, 2048}, C=64.
- C1: t(Pallas interpret fwd+bwd) / t(XLA fwd+bwd) <= 10 at T = 2048.
- C2: T 1024 -> 2048, chunked fwd+bwd time and compiled temp memory (`memory_analysis`) ratios <= 2.3.
- C3: B1 H4 T2048 P64 N64: chunked fwd+bwd >= 4x faster than autodiff through the `lax.scan`
  recurrence; chunked fwd <= 1.5x the recurrent fwd.
- C5: Mamba2 SSD (scalar) fwd+bwd <= 1.0x Gated DeltaNet (chunked XLA, K = V = 64), when that op exists.
Scalar (Mamba2) and diagonal decay are measured separately. Writes bench_ssm.{json,md,png} to --out and
exits 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from icml26zoo.kernels.ssd import pallas_chunk, reference, xla  # noqa: E402

CHUNK = 64
GOALS = {"C0_max_abs": 1e-4, "C1_interpret_max": 10.0, "C2_time_max": 2.3, "C2_mem_max": 2.3,
         "C3_fwdbwd_speedup_min": 4.0, "C3_fwd_ratio_max": 1.5, "C5_ssd_over_gdn_max": 1.0}


def inputs(seqlen, diagonal, seed=0, bsz=1, heads=4, p=64, n=64):
    """x, a, b, c and random cotangents (dy, dS); log-decays log-uniform in [1e-3, 5] as in the tests."""
    rng = np.random.default_rng(seed)
    f = lambda z: jnp.asarray(z, jnp.float32)
    a_shape = (bsz, seqlen, heads, n) if diagonal else (bsz, seqlen, heads)
    return (f(rng.standard_normal((bsz, seqlen, heads, p))),
            f(-np.exp(rng.uniform(np.log(1e-3), np.log(5.0), a_shape))),
            f(rng.standard_normal((bsz, seqlen, heads, n)) / np.sqrt(n)),
            f(rng.standard_normal((bsz, seqlen, heads, n)) / np.sqrt(n)),
            f(rng.standard_normal((bsz, seqlen, heads, p))),
            f(rng.standard_normal((bsz, heads, p, n))))


def fwd_fn(impl):
    return jax.jit(lambda x, a, b, c, dy, ds: impl(x, a, b, c, chunk_size=CHUNK))


def fwdbwd_fn(impl):
    """Forward plus VJP with the given cotangents on y and the final state; returns all gradients."""

    def run(x, a, b, c, dy, ds):
        (y, s), pull = jax.vjp(lambda *z: impl(*z, chunk_size=CHUNK), x, a, b, c)
        return (y, s) + pull((dy, ds))

    return jax.jit(run)


def timed(fn, args, repeats):
    """Min wall time over `repeats` runs after one warmup (which also compiles)."""
    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t0)
    return best


def temp_bytes(fn, args):
    return fn.lower(*args).compile().memory_analysis().temp_size_in_bytes


def bench_decay(diagonal, repeats, skip_pallas):
    """All ratios for one decay kind; returns a dict of measurements."""
    args = {t: inputs(t, diagonal) for t in (256, 1024, 2048)}
    m = {}
    m["t_rec_fwd"] = timed(fwd_fn(reference.ssd), args[2048], repeats)
    m["t_chk_fwd"] = timed(fwd_fn(xla.ssd), args[2048], repeats)
    rb = fwdbwd_fn(reference.ssd)
    m["t_rec_fb"] = timed(rb, args[2048], repeats)
    fb = fwdbwd_fn(xla.ssd)
    m["t_chk_fb_1024"] = timed(fb, args[1024], repeats)
    m["t_chk_fb"] = timed(fb, args[2048], repeats)
    m["mem_1024"] = temp_bytes(fb, args[1024])
    m["mem_2048"] = temp_bytes(fb, args[2048])
    if not skip_pallas:
        pb = fwdbwd_fn(pallas_chunk.ssd)
        m["t_pallas_fb"] = timed(pb, args[2048], 1)
        m["c0_err"] = max(
            float(jnp.max(jnp.abs(g - w)))
            for t in (256, 2048) for g, w in zip(pb(*args[t]), rb(*args[t]), strict=True))
    return m


def bench_gdn(repeats):
    """Chunked Gated DeltaNet fwd+bwd at the SSD shape (K = N, V = P), or None when the op is absent."""
    try:
        from icml26zoo.kernels.delta_rule import xla as gdn
    except ImportError:
        return None
    x, a, b, c, dy, ds = inputs(2048, False)
    beta = jnp.full(a.shape, 0.5, jnp.float32)
    ds_kv = jnp.swapaxes(ds, -1, -2)  # GDN state is [B, H, K, V]

    def run(q, k, v, g, dy, ds):
        f = lambda *z: gdn.gated_delta_rule(z[0], z[1], z[2], beta=beta, g=z[3], chunk_size=CHUNK)
        out, pull = jax.vjp(f, q, k, v, g)
        return pull((dy, ds))

    return timed(jax.jit(run), (c, b, x, a, dy, ds_kv), repeats)


def _row(goal, kind, name, value, key):
    """One table row; keys ending in _min are lower bounds, the others upper bounds."""
    limit = GOALS[key]
    ok = value >= limit if key.endswith("_min") else value <= limit
    return (goal, kind, name, value, (">= " if key.endswith("_min") else "<= ") + f"{limit:g}", ok)


def ratios(res, gdn_fb):
    """Rows: (goal, decay, measurement, value, limit, passed)."""
    rows = []
    for kind, m in res.items():
        rows += [
            _row("C3", kind, "recurrent / chunked, fwd+bwd", m["t_rec_fb"] / m["t_chk_fb"],
                 "C3_fwdbwd_speedup_min"),
            _row("C3", kind, "chunked / recurrent, fwd", m["t_chk_fwd"] / m["t_rec_fwd"], "C3_fwd_ratio_max"),
            _row("C2", kind, "time T2048 / T1024, chunked fwd+bwd", m["t_chk_fb"] / m["t_chk_fb_1024"],
                 "C2_time_max"),
            _row("C2", kind, "temp memory T2048 / T1024, chunked fwd+bwd", m["mem_2048"] / m["mem_1024"],
                 "C2_mem_max"),
        ]
        if "c0_err" in m:
            rows += [
                _row("C0", kind, "Pallas vs recurrence max-abs err (y, S, grads; T 256, 2048)", m["c0_err"],
                     "C0_max_abs"),
                _row("C1", kind, "Pallas interpret / XLA, fwd+bwd", m["t_pallas_fb"] / m["t_chk_fb"],
                     "C1_interpret_max"),
            ]
    if "diagonal" in res and "scalar" in res:
        r = res["diagonal"]["t_chk_fb"] / res["scalar"]["t_chk_fb"]
        rows.append(("info", "both", "diagonal / scalar, chunked fwd+bwd", r, "-", True))
    if gdn_fb is not None and "scalar" in res:
        rows.append(_row("C5", "scalar", "SSD / Gated DeltaNet, fwd+bwd", res["scalar"]["t_chk_fb"] / gdn_fb,
                         "C5_ssd_over_gdn_max"))
    return rows


def write(out, res, rows, gdn_fb):
    out.mkdir(parents=True, exist_ok=True)
    shape = "B1 H4 P64 N64, chunk 64, float32, " + jax.default_backend()
    (out / "bench_ssm.json").write_text(json.dumps(
        {"shape": shape, "goals": GOALS, "measurements": res, "gdn_fwdbwd_s": gdn_fb,
         "rows": [dict(zip(("goal", "decay", "measurement", "value", "limit", "pass"), r, strict=True))
                  for r in rows]}, indent=2))
    lines = [f"# SSD benchmark ({shape})", "", "| goal | decay | measurement | value | limit | pass |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {g} | {k} | {name} | {v:.3g} | {lim} | {'yes' if ok else 'NO'} |"
              for g, k, name, v, lim, ok in rows]
    lines += ["", "| decay | " + " | ".join(next(iter(res.values()))) + " |",
              "|---|" + "---|" * len(next(iter(res.values())))]
    lines += [f"| {k} | " + " | ".join(f"{v:.4g}" for v in m.values()) + " |" for k, m in res.items()]
    (out / "bench_ssm.md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = [f"{g} {k}\n{n[:28]}" for g, k, n, *_ in rows]
    ax.barh(names, [r[3] for r in rows], color=["tab:green" if r[5] else "tab:red" for r in rows])
    ax.set_xscale("log")
    ax.tick_params(axis="y", labelsize=6)
    ax.set_title("SSD ratios (green: goal met)")
    fig.tight_layout()
    fig.savefig(out / "bench_ssm.png", dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench_out")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-pallas", action="store_true", help="skip C0/C1 (interpret mode is slow)")
    opts = parser.parse_args()
    res = {kind: bench_decay(kind == "diagonal", opts.repeats, opts.skip_pallas)
           for kind in ("scalar", "diagonal")}
    gdn_fb = bench_gdn(opts.repeats)
    rows = ratios(res, gdn_fb)
    write(pathlib.Path(opts.out), res, rows, gdn_fb)
    print((pathlib.Path(opts.out) / "bench_ssm.md").read_text())
    return 0 if all(r[5] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
