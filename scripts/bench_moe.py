"""MoE benchmark: routing overhead per router and the grouped-matmul paths (issue 16, item 5).

    python scripts/bench_moe.py [--out bench_out] [--repeats 3] [--tokens 2048] [--quick]

All numbers come from one process, float32, min of --repeats timed runs after a warmup (which compiles);
only ratios measured side by side are reported as results (absolute times depend on the machine):
- R1: routing overhead: the MoE layer's forward+backward with each registered router over the same layer
  with "topk_softmax" (E = 8, k = 2, dropless, ragged_dot).
- R2: router share: one router call's forward+backward over the whole layer's, per router.
- G1: grouped matmul paths: the layer's forward+backward with implementation "dense" (one-hot: every
  token through every expert) over "ragged_dot", and their compiled temporary memory
  (`memory_analysis`), as the number of experts grows (E in 4 .. 64).
Goal on GPU/TPU (exit 1 when missed): the dense path's temporary memory at the largest E is at least 4x
ragged_dot's, which is why "ragged_dot" is the default (`MoEConfig.implementation=None`). On CPU the goal is
reported but not applied: XLA:CPU expands ragged_dot group by group, so both paths' memory grows with E
there (measured: 12 -> 42 MiB for E 4 -> 16 at 256 tokens, the dense path 10 -> 38 MiB).
Writes bench_moe.{json,md,png}.
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
from flax import nnx  # noqa: E402

from icml26zoo.moe import ROUTERS, MoEConfig, MoEFeedForward  # noqa: E402

DIM, HIDDEN, TOP_K = 128, 256, 2
GOAL_DENSE_OVER_RAGGED_MEMORY_MIN = 4.0


def layer_for(router: str, experts: int, implementation: str) -> MoEFeedForward:
    options = (("num_classes", 64),) if router == "confidence" else ()
    config = MoEConfig(num_experts=experts, top_k=TOP_K, router=router, implementation=implementation,
                       router_options=options)
    return MoEFeedForward(DIM, HIDDEN, config, rngs=nnx.Rngs(0))


def layer_fwdbwd(layer: MoEFeedForward):
    """jit(x, cotangent) -> gradients of <layer(x), cotangent> + aux loss w.r.t. all parameters and x."""
    graphdef, state = nnx.split(layer)

    def run(state, x, cotangent):
        def loss(state, x):
            y, aux = nnx.merge(graphdef, state)(x)
            return jnp.sum(y * cotangent) + aux["loss"]

        return jax.grad(loss, argnums=(0, 1))(state, x)

    fn = jax.jit(run)
    return fn, state


def router_fwdbwd(layer: MoEFeedForward):
    """jit(x, cotangent) -> gradient of <router gates, cotangent> w.r.t. the router's parameters and x."""
    graphdef, state = nnx.split(layer.router)

    def run(state, x, cotangent):
        def loss(state, x):
            routing = nnx.merge(graphdef, state)(x, jnp.ones(x.shape[:1], jnp.bool_))
            return jnp.sum(routing.gates * cotangent[:, :TOP_K])

        return jax.grad(loss, argnums=(0, 1))(state, x)

    return jax.jit(run), state


def timed(fn, args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - start)
    return best


def temp_bytes(fn, args) -> int:
    return int(fn.lower(*args).compile().memory_analysis().temp_size_in_bytes)


def inputs(tokens: int):
    keys = jax.random.split(jax.random.key(0), 2)
    return jax.random.normal(keys[0], (tokens, DIM)), jax.random.normal(keys[1], (tokens, DIM))


def bench_routers(tokens: int, repeats: int) -> dict[str, dict[str, float]]:
    x, cotangent = inputs(tokens)
    out = {}
    for router in ROUTERS.names():
        layer = layer_for(router, 8, "ragged_dot")
        fn, state = layer_fwdbwd(layer)
        route, route_state = router_fwdbwd(layer)
        out[router] = {"layer_s": timed(fn, (state, x, cotangent), repeats),
                       "router_s": timed(route, (route_state, x, cotangent), repeats)}
    return out


def bench_paths(tokens: int, repeats: int, experts: list[int]) -> dict[int, dict[str, float]]:
    x, cotangent = inputs(tokens)
    out = {}
    for count in experts:
        row = {}
        for implementation in ("dense", "ragged_dot"):
            fn, state = layer_fwdbwd(layer_for("topk_softmax", count, implementation))
            row[f"{implementation}_s"] = timed(fn, (state, x, cotangent), repeats)
            row[f"{implementation}_bytes"] = temp_bytes(fn, (state, x, cotangent))
        out[count] = row
    return out


def tables(routers: dict, paths: dict) -> tuple[list[str], bool]:
    base = routers["topk_softmax"]["layer_s"]
    lines = ["| router | layer fwd+bwd / topk_softmax's (R1) | router share of the layer (R2) |",
             "| --- | --- | --- |"]
    lines += [f"| {name} | {m['layer_s'] / base:.2f} | {m['router_s'] / m['layer_s']:.2f} |"
              for name, m in routers.items()]
    lines += ["", "| experts | time dense / ragged_dot (G1) | temp memory dense / ragged_dot (G1) | "
              "dense temp MiB | ragged_dot temp MiB |", "| --- | --- | --- | --- | --- |"]
    for count, m in paths.items():
        lines.append(f"| {count} | {m['dense_s'] / m['ragged_dot_s']:.2f} | "
                     f"{m['dense_bytes'] / max(m['ragged_dot_bytes'], 1):.2f} | {m['dense_bytes'] / 2**20:.1f} | "
                     f"{m['ragged_dot_bytes'] / 2**20:.1f} |")
    largest = paths[max(paths)]
    ratio = largest["dense_bytes"] / max(largest["ragged_dot_bytes"], 1)
    met = ratio >= GOAL_DENSE_OVER_RAGGED_MEMORY_MIN
    applies = jax.default_backend() != "cpu"
    verdict = ("met" if met else "MISSED") if applies else f"{'met' if met else 'not met'}, not applied on CPU"
    lines += ["", f"Goal: dense / ragged_dot temp memory at E = {max(paths)} is {ratio:.1f} "
              f"(>= {GOAL_DENSE_OVER_RAGGED_MEMORY_MIN:g}): {verdict}."]
    return lines, met or not applies


def plot(paths: dict, path: pathlib.Path) -> None:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 3.2))
    memory, speed = figure.subplots(1, 2)
    experts = list(paths)
    for implementation in ("dense", "ragged_dot"):
        memory.plot(experts, [paths[e][f"{implementation}_bytes"] / 2**20 for e in experts], "o-",
                    label=implementation)
        speed.plot(experts, [paths[e][f"{implementation}_s"] * 1e3 for e in experts], "o-", label=implementation)
    for axis, label in ((memory, "temp memory (MiB)"), (speed, "fwd+bwd (ms)")):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("experts")
        axis.set_ylabel(label)
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench_out")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--quick", action="store_true", help="256 tokens, E in {4, 16}, one repeat")
    args = parser.parse_args(argv)
    tokens, repeats, experts = args.tokens, args.repeats, [4, 8, 16, 32, 64]
    if args.quick:
        tokens, repeats, experts = 256, 1, [4, 16]
    routers = bench_routers(tokens, repeats)
    paths = bench_paths(tokens, repeats, experts)
    lines, ok = tables(routers, paths)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    setup = f"{tokens} tokens, D {DIM}, F {HIDDEN}, k {TOP_K}, float32, backend {jax.default_backend()}"
    (out / "bench_moe.json").write_text(json.dumps(
        {"setup": setup, "routers": routers, "paths": {str(k): v for k, v in paths.items()}, "goal_met": ok},
        indent=2))
    (out / "bench_moe.md").write_text("\n".join([f"MoE benchmark ({setup})", "", *lines, ""]))
    plot(paths, out / "bench_moe.png")
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
