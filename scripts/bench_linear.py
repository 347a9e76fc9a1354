"""Benchmark: chunked gated / momentum delta rule vs their step recurrences (docs/performance.md C1, C2, C3, C5).

All ratios are measured side by side in one process (f32, after warmup, min of --repeats runs):
  C3  chunked fwd+bwd >= 4x faster than autodiff through the `lax.scan` recurrence, B1 H4 T2048 D64;
      chunked fwd within 1.5x of the recurrent fwd.
  C2  chunked fwd+bwd time and peak temporary memory x <= 2.3 when T doubles 1024 -> 2048.
  C5  KDA <= 2.0x GDN and MDN <= 1.6x GDN (chunked fwd+bwd).
  C4  chunked GDN fwd >= 3x faster than causal softmax attention fwd at B2 H4 T4096 D128, against both
      `jax.nn.dot_product_attention(is_causal=True)` and the zoo's blocked attention (forgetting_attention,
      no gate).
C3, C2 and C1 cover DeltaNet, GDN, KDA and MDN (momentum delta rule).
  C1  Pallas (interpret) fwd+bwd <= 10x the XLA chunked path.
Writes bench_linear.json, bench_linear.md (and bench_linear.png when matplotlib is present) to --out and exits
non-zero when a goal is missed.

    python scripts/bench_linear.py --out bench_out/
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from icml26zoo.kernels.delta_rule import gated_delta_rule  # noqa: E402
from icml26zoo.kernels.forgetting_attention import forgetting_attention  # noqa: E402
from icml26zoo.kernels.momentum_delta_rule import momentum_delta_rule  # noqa: E402

B, H, D = 1, 4, 64


VARIANTS = ("deltanet", "gdn", "kda", "mdn")


def _mdn_inputs(x: dict, rng) -> dict:
    """GDN inputs plus the MDN gates as `zoo.mixers.mdn` makes them (MDN, arXiv 2605.05838): p = alpha k,
    log_mu in (-2, 0), eta in (0, 2), beta <= 1 - alpha."""
    alpha = jnp.exp(x["g"])
    f = lambda a: jnp.asarray(a, jnp.float32)
    return dict(x, p=alpha[..., None] * x["k"], log_mu=f(rng.uniform(-2, 0, alpha.shape)),
                eta=f(rng.uniform(0, 2, alpha.shape)), beta=x["beta"] * (1 - alpha))


def _inputs(variant: str, t: int, seed: int = 0) -> dict:
    if variant == "mdn":
        return _mdn_inputs(_inputs("gdn", t, seed), np.random.default_rng(seed + 1))
    rng = np.random.default_rng(seed)
    nrm = lambda x: jnp.asarray(x / np.linalg.norm(x, axis=-1, keepdims=True), jnp.float32)
    g = {"deltanet": None, "gdn": rng.uniform(-1.6, 0, (B, t, H)), "kda": rng.uniform(-1.6, 0, (B, t, H, D))}
    return dict(q=nrm(rng.standard_normal((B, t, H, D))), k=nrm(rng.standard_normal((B, t, H, D))),
                v=jnp.asarray(rng.standard_normal((B, t, H, D)), jnp.float32),
                beta=jnp.asarray(rng.uniform(0, 1, (B, t, H)), jnp.float32),
                g=None if g[variant] is None else jnp.asarray(g[variant], jnp.float32))


def _fns(impl: str, variant: str = "gdn"):
    """(forward, forward+backward) for one implementation; the backward covers every input."""
    op = momentum_delta_rule if variant == "mdn" else gated_delta_rule
    fwd = lambda x: op(**x, chunk_size=64, implementation=impl)[0]

    def fwd_bwd(x):
        loss = lambda x: jnp.sum(op(**x, chunk_size=64, implementation=impl)[0] ** 2)
        return jax.grad(loss)(x)

    return fwd, fwd_bwd


def _time(fn, x, repeats: int) -> tuple[float, int]:
    """Min wall time (s) over repeats after one warmup, and the compiled temp memory (bytes)."""
    compiled = jax.jit(fn).lower(x).compile()
    mem = compiled.memory_analysis()
    temp = int(getattr(mem, "temp_size_in_bytes", 0)) if mem is not None else 0
    jax.block_until_ready(compiled(x))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(x))
        best = min(best, time.perf_counter() - t0)
    return best, temp


def measure(repeats: int, with_pallas: bool) -> dict:
    res: dict = {}
    for variant in VARIANTS:
        for t in (1024, 2048):
            x = _inputs(variant, t)
            pallas = with_pallas and t == 2048
            impls = ("reference", "xla", "pallas") if pallas else ("reference", "xla")
            for impl in impls:
                if impl == "reference" and t == 1024:
                    continue
                fwd, fwd_bwd = _fns(impl, variant)
                res[(variant, t, impl, "fwd")] = _time(fwd, x, repeats)
                res[(variant, t, impl, "fwd+bwd")] = _time(fwd_bwd, x, repeats)
                print(f"{variant:8s} T{t} {impl:9s} fwd {res[(variant, t, impl, 'fwd')][0] * 1e3:8.1f} ms"
                      f"  fwd+bwd {res[(variant, t, impl, 'fwd+bwd')][0] * 1e3:8.1f} ms", flush=True)
    return res


C4_SHAPE = dict(B=2, H=4, T=4096, D=128)


def measure_c4(repeats: int) -> dict:
    """C4: chunked GDN forward vs causal softmax attention forward, same q/k/v, [B, T, H, D] f32."""
    b, h, t, d = (C4_SHAPE[n] for n in ("B", "H", "T", "D"))
    rng = np.random.default_rng(0)
    nrm = lambda x: jnp.asarray(x / np.linalg.norm(x, axis=-1, keepdims=True), jnp.float32)
    x = dict(q=nrm(rng.standard_normal((b, t, h, d))), k=nrm(rng.standard_normal((b, t, h, d))),
             v=jnp.asarray(rng.standard_normal((b, t, h, d)), jnp.float32),
             beta=jnp.asarray(rng.uniform(0, 1, (b, t, h)), jnp.float32),
             g=jnp.asarray(rng.uniform(-1.6, 0, (b, t, h)), jnp.float32))
    fns = {
        "gdn_chunked": lambda x: gated_delta_rule(**x, chunk_size=64, implementation="xla")[0],
        "sdpa_causal": lambda x: jax.nn.dot_product_attention(x["q"], x["k"], x["v"], is_causal=True),
        "zoo_attention": lambda x: forgetting_attention(x["q"], x["k"], x["v"], None, implementation="xla"),
    }
    res = {}
    for name, fn in fns.items():
        res[("c4", t, name, "fwd")] = _time(fn, x, repeats)
        print(f"C4 B{b} H{h} T{t} D{d} {name:13s} fwd {res[('c4', t, name, 'fwd')][0] * 1e3:8.1f} ms", flush=True)
    return res


def _goal(goal: str, what: str, ratio: float, op: str, bound: float) -> dict:
    ok = ratio >= bound if op == ">=" else ratio <= bound
    return dict(goal=goal, what=what, ratio=float(ratio), op=op, bound=bound, ok=bool(ok))


def goals(res: dict, with_pallas: bool) -> list[dict]:
    tm = lambda v, t, impl, kind: res[(v, t, impl, kind)][0]
    fb = "fwd+bwd"
    rows = []
    for v in VARIANTS:
        rows.append(_goal("C3", f"{v}: recurrent / chunked fwd+bwd",
                          tm(v, 2048, "reference", fb) / tm(v, 2048, "xla", fb), ">=", 4.0))
        rows.append(_goal("C3", f"{v}: chunked / recurrent fwd",
                          tm(v, 2048, "xla", "fwd") / tm(v, 2048, "reference", "fwd"), "<=", 1.5))
        rows.append(_goal("C2", f"{v}: chunked fwd+bwd time T2048 / T1024",
                          tm(v, 2048, "xla", fb) / tm(v, 1024, "xla", fb), "<=", 2.3))
        m2, m1 = res[(v, 2048, "xla", fb)][1], res[(v, 1024, "xla", fb)][1]
        rows.append(_goal("C2", f"{v}: chunked fwd+bwd temp memory T2048 / T1024",
                          m2 / max(m1, 1), "<=", 2.3))
        if with_pallas:
            rows.append(_goal("C1", f"{v}: pallas(interpret) / xla fwd+bwd",
                              tm(v, 2048, "pallas", fb) / tm(v, 2048, "xla", fb), "<=", 10.0))
    if ("c4", C4_SHAPE["T"], "gdn_chunked", "fwd") in res:
        t4 = C4_SHAPE["T"]
        for name, label in (("sdpa_causal", "jax.nn.dot_product_attention"), ("zoo_attention", "zoo attention")):
            rows.append(_goal("C4", f"{label} causal / chunked GDN fwd (B2 H4 T4096 D128)",
                              tm("c4", t4, name, "fwd") / tm("c4", t4, "gdn_chunked", "fwd"), ">=", 3.0))
    rows.append(_goal("C5", "KDA / GDN chunked fwd+bwd",
                      tm("kda", 2048, "xla", fb) / tm("gdn", 2048, "xla", fb), "<=", 2.0))
    rows.append(_goal("C5", "MDN / GDN chunked fwd+bwd",
                      tm("mdn", 2048, "xla", fb) / tm("gdn", 2048, "xla", fb), "<=", 1.6))
    return rows


def write(rows: list[dict], res: dict, out: str) -> None:
    os.makedirs(out, exist_ok=True)
    timings = [dict(variant=k[0], T=k[1], impl=k[2], pass_=k[3], seconds=v[0], temp_bytes=v[1])
               for k, v in res.items()]
    with open(os.path.join(out, "bench_linear.json"), "w") as f:
        json.dump(dict(shape=dict(B=B, H=H, D=D), goals=rows, timings=timings), f, indent=2)
    lines = ["| goal | measurement | ratio | bound | ok |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r['goal']} | {r['what']} | {r['ratio']:.2f} | {r['op']} {r['bound']} | "
              f"{'yes' if r['ok'] else '**MISS**'} |" for r in rows]
    text = "\n".join(lines)
    with open(os.path.join(out, "bench_linear.md"), "w") as f:
        f.write(f"# bench_linear (B{B} H{H} D{D}, f32, {jax.default_backend()})\n\n{text}\n")
    print(text)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.barh([r["what"] for r in rows], [r["ratio"] for r in rows],
            color=["tab:green" if r["ok"] else "tab:red" for r in rows])
    ax.set_xscale("log")
    ax.set_xlabel("ratio (see bench_linear.md for the bound)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "bench_linear.png"), dpi=100)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="bench_out/")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-pallas", action="store_true", help="skip the interpret-mode Pallas timing (C1)")
    p.add_argument("--no-c4", action="store_true", help="skip the linear-vs-softmax timing at T=4096 (C4)")
    args = p.parse_args()
    res = measure(args.repeats, not args.no_pallas)
    if not args.no_c4:
        res.update(measure_c4(args.repeats))
    rows = goals(res, not args.no_pallas)
    write(rows, res, args.out)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
