"""Forgetting-attention benchmark on CPU: PERFORMANCE.md goals C1, C2 and C5 (C0 is the test suite).

    python scripts/bench_attention.py [--out bench_out] [--lengths 1024 2048] [--repeats 3]

Times fwd+bwd (a VJP with a random cotangent, jitted) of: the materialized reference, the blocked XLA
path with the gate (FoX) and without it (log_fgate=None: plain causal flash attention through the same
blocked code), the Pallas kernels (interpret mode off GPU) and jax.nn.dot_product_attention, all in one
process, min of `--repeats` interleaved runs after a warmup. Peak temporary memory is XLA's own estimate,
`jit(f).lower(...).compile().memory_analysis().temp_size_in_bytes`. Writes bench_attention.{json,md} to
--out and exits 1 when a goal is missed:
  C1  t(pallas) / t(reference) ≤ 3 at T ≤ 1024;
  C2  blocked XLA: time ×≤ 4.5 and temporary memory ×≤ 2.3 when T doubles;
  C5  FoX / plain attention through the same blocked path ≤ 1.25 (fwd+bwd).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from kernels.forgetting_attention import pallas, reference, xla  # noqa: E402

GOALS = {"c1_max": 3.0, "c2_time_max": 4.5, "c2_mem_max": 2.3, "c5_max": 1.25}
SHAPE = {"b": 1, "h": 4, "hkv": 4, "d": 64}


def _sdpa(q, k, v, log_fgate, segment_ids=None):
    del log_fgate, segment_ids
    return jax.nn.dot_product_attention(q, k, v, is_causal=True)


PATHS = {
    "reference": lambda q, k, v, a: reference.forgetting_attention(q, k, v, a),
    "xla_fox": lambda q, k, v, a: xla.forgetting_attention(q, k, v, a),
    "xla_plain": lambda q, k, v, a: xla.forgetting_attention(q, k, v, None),
    "pallas_fox": lambda q, k, v, a: pallas.forgetting_attention(q, k, v, a),
    "sdpa": _sdpa,
}


def _inputs(t):
    rng = np.random.default_rng(t)
    b, h, hkv, d = SHAPE["b"], SHAPE["h"], SHAPE["hkv"], SHAPE["d"]
    arr = lambda *s: jnp.asarray(rng.normal(size=s), jnp.float32)
    a = jnp.asarray(np.log(rng.uniform(0.9, 1.0, size=(b, t, h))), jnp.float32)
    return arr(b, t, h, d), arr(b, t, hkv, d), arr(b, t, hkv, d), a, arr(b, t, h, d)


def _fwd_bwd(fn):
    def run(q, k, v, a, ct):
        o, vjp = jax.vjp(fn, q, k, v, a)
        return o, vjp(ct)

    return jax.jit(run)


def measure_all(t, repeats):
    """{path: seconds (min over repeats), temp bytes} of every path's jitted fwd+bwd at length t.

    Repeats are interleaved round-robin over the paths, so load from other processes on a shared machine
    hits every path alike and the in-run ratios stay comparable.
    """
    args = _inputs(t)
    compiled, out = {}, {}
    for name, fn in PATHS.items():
        compiled[name] = _fwd_bwd(fn).lower(*args).compile()
        mem = compiled[name].memory_analysis()
        out[name] = {"seconds": float("inf"), "temp_bytes": int(mem.temp_size_in_bytes) if mem else None}
        jax.block_until_ready(compiled[name](*args))  # warmup
    for _ in range(repeats):
        for name in PATHS:
            start = time.perf_counter()
            jax.block_until_ready(compiled[name](*args))
            out[name]["seconds"] = min(out[name]["seconds"], time.perf_counter() - start)
    return out


def evaluate(results, lengths):
    """Ratios and goal verdicts from {name: {t: measurement}}."""
    sec = lambda n, t: results[n][t]["seconds"]
    checks = []
    for t in lengths:
        checks.append((f"C5 FoX/plain blocked xla T={t}", sec("xla_fox", t) / sec("xla_plain", t),
                       GOALS["c5_max"]))
        checks.append((f"info: blocked xla / sdpa T={t}", sec("xla_fox", t) / sec("sdpa", t), None))
        checks.append((f"info: pallas / blocked xla T={t}", sec("pallas_fox", t) / sec("xla_fox", t), None))
        goal = GOALS["c1_max"] if t <= 1024 else None
        checks.append((f"C1 pallas/reference T={t}", sec("pallas_fox", t) / sec("reference", t), goal))
    for t0, t1 in zip(lengths[:-1], lengths[1:], strict=True):
        for name in ("xla_fox", "pallas_fox"):
            checks.append((f"C2 {name} time T{t1}/T{t0}", sec(name, t1) / sec(name, t0),
                           GOALS["c2_time_max"]))
            m0, m1 = results[name][t0]["temp_bytes"], results[name][t1]["temp_bytes"]
            checks.append((f"C2 {name} temp memory T{t1}/T{t0}", m1 / max(m0, 1), GOALS["c2_mem_max"]))
        ref = results["reference"]
        checks.append((f"info: reference temp memory T{t1}/T{t0}",
                       ref[t1]["temp_bytes"] / max(ref[t0]["temp_bytes"], 1), None))
    return [{"check": c, "ratio": r, "goal": g, "ok": g is None or r <= g} for c, r, g in checks]


def to_markdown(results, checks, lengths):
    lines = ["| path | " + " | ".join(f"T={t} ms | T={t} temp MiB" for t in lengths) + " |",
             "|---|" + "---|---|" * len(lengths)]
    for name, per_t in results.items():
        cells = [f"{per_t[t]['seconds'] * 1e3:.1f} | {per_t[t]['temp_bytes'] / 2**20:.1f}" for t in lengths]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "| check | ratio | goal | ok |", "|---|---|---|---|"]
    for c in checks:
        goal = "—" if c["goal"] is None else f"≤ {c['goal']}"
        lines.append(f"| {c['check']} | {c['ratio']:.2f} | {goal} | {'yes' if c['ok'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench_out")
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    results = {name: {} for name in PATHS}
    for t in args.lengths:
        for name, m in measure_all(t, args.repeats).items():
            results[name][t] = m
            print(f"{name:12s} T={t:5d} {results[name][t]['seconds'] * 1e3:9.1f} ms "
                  f"{results[name][t]['temp_bytes'] / 2**20:8.1f} MiB temp", flush=True)
    checks = evaluate(results, args.lengths)
    table = to_markdown(results, checks, args.lengths)
    print(table)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    payload = {"shape": SHAPE, "backend": jax.default_backend(), "goals": GOALS, "lengths": args.lengths,
               "results": {n: {str(t): m for t, m in r.items()} for n, r in results.items()},
               "checks": checks}
    (out / "bench_attention.json").write_text(json.dumps(payload, indent=2))
    (out / "bench_attention.md").write_text(table)
    return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
