"""The first-contact GPU check: sanity, then every op's Pallas path against its XLA path and its reference,
then timings at the H-goal shapes of the performance goals (docs/performance.md), in one process.

    python scripts/gpu_check.py --out gpu_check.json            # one H200, under 5 minutes
    python scripts/gpu_check.py --dry-run --out /tmp/dry.json   # tiny shapes, interpreted on CPU
    python scripts/gpu_check.py --ops fox,gdn                   # only these ops' accuracy and timing rows

Sections, in order:
- H0: device kind, jax version, a bf16 matmul (TFLOP/s; 8192^3 on the GPU) and an HBM read+write of a
  4 GB array (TB/s).
- Accuracy: for every op with a Pallas path (FoX, FiX, DeltaNet, Gated DeltaNet, KDA, MDN, SSD scalar and
  diagonal, selective scan), forward outputs and the gradients of every differentiable input through one
  VJP with fixed random cotangents, on small shapes, in float32 (matmul precision "highest") and bfloat16:
  max-abs error of pallas vs xla, pallas vs reference and xla vs reference (the reference runs on the same
  values upcast to float32).
- Timings: forward and forward+backward of the pallas and xla paths (and cuDNN's
  `jax.nn.dot_product_attention` on the attention rows) at the shapes of goals H1-H3, H6, H7 and H9, bf16,
  warmup then the median of `--iters` runs with `block_until_ready`.
- H4 (dense form): causal attention with a dense per-head additive bias [1, H, T, T] against the same
  attention without it, XLA's `jax.nn.dot_product_attention` (and cuDNN), fwd and fwd+bwd, as a ratio.
  GOAT's parametric prior is computed inside its mixer, not by an op, so its ≤ 1.10× goal is not timed
  here; H8 (a fused-recurrent kernel) needs a kernel the zoo does not have yet; H10/H11 (the LM step,
  compile time) are scripts/bench_train.py's.
- H5 (real run only): PBS-Attn prefill at T = 32k, block 128, lists capped at block densities 0.3 and 0.4,
  permutation and selection included, forward bf16, over the dense zoo attention of the same implementation.
Prints one table and writes every row to `--out` (JSON).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.kernels import (
    forgetting_attention,
    gated_delta_rule,
    momentum_delta_rule,
    selective_scan,
    ssd,
    value_forget_attention,
)

Arrays = tuple[jax.Array, ...]
# jit's compiler options; the dry run sets XLA's backend optimization level 0 (about half the compile time
# on CPU; the HLO, hence the float results, stay as they are).
COMPILER_OPTIONS: dict[str, int] = {}


def _jit(fn: Callable[..., object]) -> Callable[..., object]:
    return jax.jit(fn, compiler_options=COMPILER_OPTIONS or None)


@dataclass(frozen=True)
class Op:
    """One op: `make(rng, dims, dtype)` -> its differentiable inputs; `call(impl, *inputs)` -> its outputs."""

    name: str
    make: Callable[[np.random.Generator, dict[str, int], jnp.dtype], Arrays]
    call: Callable[..., object]
    attention: bool = False


def _normal(rng: np.random.Generator, shape: tuple[int, ...], dtype: jnp.dtype, scale: float = 1.0) -> jax.Array:
    return jnp.asarray(rng.standard_normal(shape) * scale, dtype)


def _log_gate(rng: np.random.Generator, shape: tuple[int, ...]) -> jax.Array:
    """Log forget gates in float32, log-sigmoid of N(3, 1): mostly close to 0, as trained gates are."""
    return jax.nn.log_sigmoid(jnp.asarray(rng.standard_normal(shape) + 3.0, jnp.float32))


def _unit(x: jax.Array) -> jax.Array:
    return (x / jnp.linalg.norm(x.astype(jnp.float32), axis=-1, keepdims=True)).astype(x.dtype)


def _attention_inputs(rng: np.random.Generator, d: dict[str, int], dtype: jnp.dtype) -> Arrays:
    shape = (d["B"], d["T"], d["H"], d["D"])
    return (_normal(rng, shape, dtype), _normal(rng, shape, dtype), _normal(rng, shape, dtype),
            _log_gate(rng, shape[:3]))


def _fix_inputs(rng: np.random.Generator, d: dict[str, int], dtype: jnp.dtype) -> Arrays:
    q, k, v, f = _attention_inputs(rng, d, dtype)
    return q, k, v, _log_gate(rng, (d["B"], d["T"], d["H"], d["D"])), f


def _delta_inputs(gate: str) -> Callable[[np.random.Generator, dict[str, int], jnp.dtype], Arrays]:
    """q, k (unit rows), v, beta in (0, 1) and the log-decay: none (DeltaNet), per head (GDN), per key (KDA)."""

    def make(rng: np.random.Generator, d: dict[str, int], dtype: jnp.dtype) -> Arrays:
        shape = (d["B"], d["T"], d["H"], d["D"])
        q, k = _unit(_normal(rng, shape, dtype)), _unit(_normal(rng, shape, dtype))
        beta = jax.nn.sigmoid(jnp.asarray(rng.standard_normal(shape[:3]), jnp.float32))
        base = (q, k, _normal(rng, shape, dtype), beta)
        return base if gate == "none" else base + (_log_gate(rng, shape if gate == "key" else shape[:3]),)

    return make


def _mdn_inputs(rng: np.random.Generator, d: dict[str, int], dtype: jnp.dtype) -> Arrays:
    shape = (d["B"], d["T"], d["H"], d["D"])
    q, k, p = (_unit(_normal(rng, shape, dtype)) for _ in range(3))
    gates = shape[:3]
    return (q, k, _normal(rng, shape, dtype), p, _log_gate(rng, gates), _log_gate(rng, gates),
            jax.nn.sigmoid(jnp.asarray(rng.standard_normal(gates), jnp.float32)),
            jnp.asarray(rng.uniform(0.1, 1.0, gates), jnp.float32))


def _ssd_inputs(diagonal: bool) -> Callable[[np.random.Generator, dict[str, int], jnp.dtype], Arrays]:
    """x [B, T, H, P], a < 0 ([B, T, H] or [B, T, H, N]), b, c [B, T, H, N] scaled by N^-1/2."""

    def make(rng: np.random.Generator, d: dict[str, int], dtype: jnp.dtype) -> Arrays:
        b, t, h, p, n = d["B"], d["T"], d["H"], d["D"], d["N"]
        a_shape = (b, t, h, n) if diagonal else (b, t, h)
        a = -jnp.asarray(np.exp(rng.uniform(np.log(1e-3), np.log(1.0), a_shape)), jnp.float32)
        return (_normal(rng, (b, t, h, p), dtype), a, _normal(rng, (b, t, h, n), dtype, n**-0.5),
                _normal(rng, (b, t, h, n), dtype, n**-0.5))

    return make


def _scan_inputs(rng: np.random.Generator, d: dict[str, int], dtype: jnp.dtype) -> Arrays:
    b, t, ch, n = d["B"], d["T"], d["D_in"], d["N"]
    return (_normal(rng, (b, t, ch), dtype),
            jax.nn.softplus(jnp.asarray(rng.standard_normal((b, t, ch)) - 2.0, jnp.float32)),
            -jnp.asarray(np.exp(rng.uniform(-1.0, 1.0, (ch, n))), jnp.float32),
            _normal(rng, (b, t, n), dtype), _normal(rng, (b, t, n), dtype))


def _gdn(impl: str, q: jax.Array, k: jax.Array, v: jax.Array, beta: jax.Array,
         g: jax.Array | None = None) -> object:
    return gated_delta_rule(q, k, v, beta=beta, g=g, implementation=impl)


OPS = {
    "fox": Op("fox", _attention_inputs,
              lambda impl, q, k, v, f: forgetting_attention(q, k, v, f, implementation=impl), attention=True),
    "fix": Op("fix", _fix_inputs, lambda impl, q, k, v, vg, f: value_forget_attention(
        q, k, v, vg, log_fgate=f, implementation=impl), attention=True),
    "deltanet": Op("deltanet", _delta_inputs("none"), _gdn),
    "gdn": Op("gdn", _delta_inputs("head"), _gdn),
    "kda": Op("kda", _delta_inputs("key"), _gdn),
    "mdn": Op("mdn", _mdn_inputs, lambda impl, q, k, v, p, g, mu, beta, eta: momentum_delta_rule(
        q, k, v, p, g=g, log_mu=mu, beta=beta, eta=eta, implementation=impl)),
    "ssd_scalar": Op("ssd_scalar", _ssd_inputs(False), lambda impl, *z: ssd(*z, implementation=impl)),
    "ssd_diagonal": Op("ssd_diagonal", _ssd_inputs(True), lambda impl, *z: ssd(*z, implementation=impl)),
    "selective_scan": Op("selective_scan", _scan_inputs, lambda impl, *z: selective_scan(*z, implementation=impl)),
}


def vjp_fn(op: Op, impl: str) -> Callable[..., tuple[object, Arrays]]:
    """jit of (inputs, cotangents) -> (outputs, gradients of every input)."""

    def run(inputs: Arrays, cotangents: object) -> tuple[object, Arrays]:
        out, pull = jax.vjp(lambda *z: op.call(impl, *z), *inputs)
        return out, pull(cotangents)

    return _jit(run)


def _max_abs(got: object, want: object) -> float:
    pairs = zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True)
    return max(float(jnp.max(jnp.abs(g.astype(jnp.float32) - w.astype(jnp.float32)))) for g, w in pairs)


def accuracy_rows(dims: dict[str, dict[str, int]], dtypes: tuple[jnp.dtype, ...], ops: list[str]) -> list[dict]:
    """Max-abs errors of forward and gradients, per op of `ops` and dtype (float32 at matmul precision
    "highest")."""
    rows = []
    for op in (OPS[name] for name in ops):
        for dtype in dtypes:
            rng = np.random.default_rng(0)
            inputs = op.make(rng, dims["attention" if op.attention else "recurrent"], dtype)
            ref_inputs = tuple(x.astype(jnp.float32) for x in inputs)
            out_shape = jax.eval_shape(lambda *z, op=op: op.call("xla", *z), *inputs)
            cts = jax.tree.map(lambda s, rng=rng: jnp.asarray(rng.standard_normal(s.shape), s.dtype), out_shape)
            ref_cts = jax.tree.map(lambda c: c.astype(jnp.float32), cts)
            with jax.default_matmul_precision("highest" if dtype == jnp.float32 else "default"):
                results = {impl: vjp_fn(op, impl)(inputs, cts) for impl in ("pallas", "xla")}
                results["reference"] = vjp_fn(op, "reference")(ref_inputs, ref_cts)
            name = jnp.dtype(dtype).name
            for a, b in (("pallas", "xla"), ("pallas", "reference"), ("xla", "reference")):
                rows.append({"section": "accuracy", "op": op.name, "dtype": name, "pair": f"{a} vs {b}",
                             "fwd_max_abs": _max_abs(results[a][0], results[b][0]),
                             "grad_max_abs": _max_abs(results[a][1], results[b][1])})
    return rows


def timed(fn: Callable[..., object], args: Arrays, iters: int) -> float:
    """Median seconds over `iters` runs after 2 warmup runs (the first compiles)."""
    for _ in range(2):
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _forward_and_backward(call: Callable[..., object]) -> Callable[..., object]:
    """jit of the forward plus the VJP with cotangents of ones (all gradients returned)."""

    def run(*inputs: jax.Array) -> object:
        out, pull = jax.vjp(call, *inputs)
        return pull(jax.tree.map(jnp.ones_like, out))

    return _jit(run)


def _cudnn(q: jax.Array, k: jax.Array, v: jax.Array, *_: jax.Array) -> jax.Array:
    return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="cudnn")


def timing_rows(goals: list[tuple[str, str, dict[str, int]]], iters: int, with_cudnn: bool) -> list[dict]:
    """Forward and forward+backward times (ms) of each goal's op, bf16, pallas and xla (and cuDNN)."""
    rows = []
    for goal, op_name, dims in goals:
        op = OPS[op_name]
        inputs = op.make(np.random.default_rng(1), dims, jnp.bfloat16)
        paths = {impl: (lambda *z, impl=impl, op=op: op.call(impl, *z)) for impl in ("pallas", "xla")}
        if with_cudnn and op.attention:
            paths["cudnn"] = _cudnn
        shape = " ".join(f"{k}{v}" for k, v in dims.items())
        for path, call in paths.items():
            for kind, fn in (("fwd", _jit(call)), ("fwd+bwd", _forward_and_backward(call))):
                try:
                    ms, error = 1e3 * timed(fn, inputs, iters), None
                except Exception as exc:  # noqa: BLE001  (a failing row is reported, the run goes on)
                    ms, error = float("nan"), f"{type(exc).__name__}: {str(exc)[:200]}"
                rows.append({"section": "timing", "row": f"{goal} {op.name} {kind} {path}", "goal": goal,
                             "op": op.name, "kind": kind, "path": path, "shape": shape, "ms": ms, "error": error})
    return rows


def sanity(dry_run: bool) -> dict:
    """H0: device kind, jax version, bf16 matmul TFLOP/s, HBM bandwidth (read + write of one array, TB/s)."""
    n = 256 if dry_run else 8192
    x = jnp.ones((n, n), jnp.bfloat16)
    iters = 3 if dry_run else 10
    seconds = timed(jax.jit(lambda a: a @ a), (x,), iters)
    # 4 GB of float32 on the GPU (1 MB in the dry run); the scale keeps XLA from aliasing input and output.
    y = jnp.ones(((1 << 18) if dry_run else (1 << 30),), jnp.float32)
    copy_seconds = timed(jax.jit(lambda a: a * 1.0001), (y,), iters)
    return {"section": "sanity", "row": "H0 bf16 matmul", "device": jax.devices()[0].device_kind,
            "jax": jax.__version__, "n": n, "ms": 1e3 * seconds, "tflops": 2 * n**3 / seconds / 1e12,
            "hbm_bytes": 2 * y.nbytes, "hbm_tbps": 2 * y.nbytes / copy_seconds / 1e12}


def prior_rows(dims: dict[str, int], iters: int, with_cudnn: bool) -> list[dict]:
    """H4, dense form: causal attention with a [1, H, T, T] additive bias over the same without it (bf16)."""
    rng = np.random.default_rng(2)
    b, t, h, d = dims["B"], dims["T"], dims["H"], dims["D"]
    q, k, v = (_normal(rng, (b, t, h, d), jnp.bfloat16) for _ in range(3))
    bias = _normal(rng, (1, h, t, t), jnp.bfloat16)
    rows = []
    for impl in ("xla", "cudnn") if with_cudnn else ("xla",):
        plain = lambda q, k, v, impl=impl: jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=impl)
        biased = lambda q, k, v, impl=impl: jax.nn.dot_product_attention(q, k, v, bias=bias, is_causal=True,
                                                                         implementation=impl)
        for kind, wrap in (("fwd", _jit), ("fwd+bwd", _forward_and_backward)):
            try:
                base, with_bias = (1e3 * timed(wrap(f), (q, k, v), iters) for f in (plain, biased))
                row = {"ms": with_bias, "plain_ms": base, "ratio": with_bias / base, "error": None}
            except Exception as exc:  # noqa: BLE001  (a failing row is reported, the run goes on)
                row = {"ms": float("nan"), "plain_ms": float("nan"), "ratio": float("nan"),
                       "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            rows.append({"section": "prior", "row": f"H4 dense bias {kind} {impl}", "kind": kind, "path": impl,
                         "shape": f"B{b} T{t} H{h} D{d}", **row})
    return rows


def pbs_rows(dims: dict[str, int], iters: int) -> list[dict]:
    """H5: PBS-Attn prefill (permutation and selection included, lists capped at ρ of the mean causal list)
    over the zoo's dense causal attention (FoX op without gate), bf16 forward, at densities 0.3 and 0.4."""
    from icml26zoo.longctx.pbs import pbs_prefill

    rng = np.random.default_rng(3)
    b, t, h, d, c = dims["B"], dims["T"], dims["H"], dims["D"], dims["C"]
    q, k, v = (_normal(rng, (b, t, h, d), jnp.bfloat16) for _ in range(3))
    rows = []
    for impl in ("xla", "pallas"):
        dense = _jit(lambda q, k, v, impl=impl: forgetting_attention(q, k, v, None, implementation=impl))
        for rho in (0.3, 0.4):
            cap = max(3, round(rho * (t // c + 1) / 2))
            sparse = _jit(lambda q, k, v, impl=impl, cap=cap: pbs_prefill(
                q, k, v, tau=0.95, block_size=c, segment_size=2 * c, max_blocks=cap, implementation=impl))
            try:
                base, ms = (1e3 * timed(f, (q, k, v), iters) for f in (dense, sparse))
                row = {"ms": ms, "dense_ms": base, "speedup": base / ms, "error": None}
            except Exception as exc:  # noqa: BLE001  (a failing row is reported, the run goes on)
                row = {"ms": float("nan"), "dense_ms": float("nan"), "speedup": float("nan"),
                       "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            rows.append({"section": "pbs", "row": f"H5 PBS density {rho} fwd {impl}", "kind": "fwd", "path": impl,
                         "shape": f"B{b} T{t} H{h} D{d} C{c}", **row})
    return rows


def plan(dry_run: bool) -> tuple[dict[str, dict[str, int]], list[tuple[str, str, dict[str, int]]]]:
    """(accuracy shapes, timing goals) for the real run or the dry run."""
    if dry_run:
        small = {"B": 1, "T": 16, "H": 2, "D": 16, "N": 16, "D_in": 16}
        acc = {"attention": {k: small[k] for k in "BTHD"}, "recurrent": small}
        tiny = lambda *keys: {k: small[k] for k in keys}
        return acc, [("H1-H2", "fox", tiny(*"BTHD")), ("H6", "gdn", tiny(*"BTHD")),
                     ("scan", "selective_scan", tiny("B", "T", "D_in", "N"))]
    acc = {"attention": {"B": 2, "T": 512, "H": 4, "D": 128},
           "recurrent": {"B": 2, "T": 512, "H": 4, "D": 128, "N": 64, "D_in": 256}}
    attn = {"B": 4, "T": 8192, "H": 16, "D": 128}
    h6a, h6b = {"B": 1, "T": 8192, "H": 96, "D": 128}, {"B": 2, "T": 16384, "H": 16, "D": 128}
    ssd_shape = dict(h6a, N=128)
    return acc, [
        ("H1-H2", "fox", attn), ("H3", "fix", attn),
        ("H6", "gdn", h6a), ("H6", "gdn", h6b),
        ("H7", "kda", h6a), ("H7", "mdn", h6a), ("H7", "deltanet", h6a), ("H7", "ssd_scalar", ssd_shape),
        ("H7", "ssd_diagonal", ssd_shape),
        ("H9", "gdn", {"B": 8, "T": 4096, "H": 16, "D": 128}), ("H9", "fox", {"B": 8, "T": 4096, "H": 16, "D": 128}),
        ("H9", "gdn", {"B": 4, "T": 8192, "H": 16, "D": 128}),
        # No H goal names Mamba1; a Mamba-1.4B-sized layer, for the record.
        ("no goal", "selective_scan", {"B": 1, "T": 8192, "D_in": 4096, "N": 16}),
    ]


def print_table(rows: list[dict]) -> None:
    print(f"{'section':<9} {'row':<56} {'value':>28}")
    for r in rows:
        if r["section"] == "sanity":
            label = f"{r['row']}, HBM ({r['device']}, jax {r['jax']})"
            value = f"{r['tflops']:.3g} TFLOP/s, {r['hbm_tbps']:.3g} TB/s"
        elif r["section"] == "prior":
            label = f"{r['row']} [{r['shape']}]"
            value = r["error"] or f"{r['ms']:.3f} ms ({r['ratio']:.2f}x plain)"
        elif r["section"] == "pbs":
            label = f"{r['row']} [{r['shape']}]"
            value = r["error"] or f"{r['ms']:.3f} ms ({r['speedup']:.2f}x faster than dense)"
        elif r["section"] == "accuracy":
            label = f"{r['op']} {r['dtype']} {r['pair']}"
            value = f"fwd {r['fwd_max_abs']:.2e} grad {r['grad_max_abs']:.2e}"
        else:
            label, value = f"{r['row']} [{r['shape']}]", r["error"] or f"{r['ms']:.3f} ms"
        print(f"{r['section']:<9} {label:<56} {value:>28}")


def parse_ops(value: str) -> list[str]:
    """--ops "fox,gdn" -> ["fox", "gdn"]; every name must be a key of OPS."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = sorted(set(names) - set(OPS))
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"--ops must name ops among {sorted(OPS)}, got {value!r}")
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu_check.json")
    parser.add_argument("--dry-run", action="store_true", help="tiny shapes, interpret mode on CPU, no cuDNN")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--ops", type=parse_ops, default=list(OPS),
                        help=f"comma-separated ops for the accuracy and timing rows (default: all of {','.join(OPS)})")
    opts = parser.parse_args()
    if opts.dry_run:
        jax.config.update("jax_platforms", "cpu")
        COMPILER_OPTIONS["xla_backend_optimization_level"] = 0
    elif jax.default_backend() != "gpu":
        print(f"gpu_check: the backend is {jax.default_backend()!r}, expected 'gpu' (or pass --dry-run)")
        return 2
    else:
        jax.config.update("jax_compilation_cache_dir", "/tmp/jax_cache")
    acc_dims, goals = plan(opts.dry_run)
    goals = [goal for goal in goals if goal[1] in opts.ops]
    rows = [sanity(opts.dry_run)]
    rows += accuracy_rows(acc_dims, (jnp.float32,) if opts.dry_run else (jnp.float32, jnp.bfloat16), opts.ops)
    rows += timing_rows(goals, 2 if opts.dry_run else opts.iters, with_cudnn=not opts.dry_run)
    prior = {"B": 1, "T": 16, "H": 2, "D": 16} if opts.dry_run else {"B": 4, "T": 8192, "H": 16, "D": 128}
    rows += prior_rows(prior, 2 if opts.dry_run else opts.iters, with_cudnn=not opts.dry_run)
    if not opts.dry_run:
        rows += pbs_rows({"B": 1, "T": 32768, "H": 16, "D": 128, "C": 128}, opts.iters)
    print_table(rows)
    with open(opts.out, "w") as f:
        json.dump({"dry_run": opts.dry_run, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
