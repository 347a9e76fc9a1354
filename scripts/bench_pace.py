"""PACE attention's runtime against the number of tokens N (invariant 5 of its page) on CPU.

    python scripts/bench_pace.py [--lengths 256 1024] [--dim 64] [--heads 4] [--rank 32] [--batch 8] [--repeats 5]

Times the forward of each token mixer of `icml26zoo.geometric.pace_layers` (jitted; process CPU time, min of
`--repeats` runs after a warmup) on random tokens [B, N, d]:
  pace_sketch  PACE with the expansion's covariance sketched by S [N, r] (the randomized form)
  pace_exact   PACE with the exact covariance Xᵀ W X (also linear in N: a d×d statistic)
  tssa         ToST's token statistics attention (linear in N)
  mssa         CRATE's subspace self-attention (an N×N softmax: quadratic)
and prints the time ratio between the longest and the shortest length. The spec's goal: for PACE with a
fixed rank, time(N = 1024) / time(N = 256) ≈ 4 (linear), not 16. Exits 1 when pace_sketch's ratio exceeds
`--max-ratio` (default 8: linear with a factor-2 margin for a shared machine).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from icml26zoo.geometric.pace_layers import PaceLayerConfig, build_attention  # noqa: E402

MIXERS = {
    "pace_sketch": ("pace", {"expand": "sketch"}),
    "pace_exact": ("pace", {"expand": "exact"}),
    "tssa": ("tssa", {}),
    "mssa": ("mssa", {}),
}


def time_mixer(name: str, args: argparse.Namespace, num_tokens: int) -> float:
    """CPU seconds of one jitted forward of mixer `name` on [batch, num_tokens, dim] (min over repeats).

    Process CPU time, not wall time: on a shared machine the wall time mostly measures the other jobs.
    """
    attention, extra = MIXERS[name]
    cfg = PaceLayerConfig(dim=args.dim, num_heads=args.heads, sketch_rank=args.rank, **extra)
    layer = build_attention(attention, cfg, rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(layer)
    forward = jax.jit(lambda state, x, w, key: nnx.merge(graphdef, state)(x, w, key))
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((args.batch, num_tokens, args.dim)), jnp.float32)
    weights = jnp.ones((args.batch, num_tokens), jnp.float32)
    key = jax.random.key(0)
    forward(state, x, weights, key).block_until_ready()
    best = float("inf")
    for _ in range(args.repeats):
        start = time.process_time()
        forward(state, x, weights, key).block_until_ready()
        best = min(best, time.process_time() - start)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--rank", type=int, default=32)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-ratio", type=float, default=8.0)
    args = parser.parse_args()
    lengths = sorted(args.lengths)
    print(f"B={args.batch} d={args.dim} K={args.heads} r={args.rank}; forward CPU ms (min of {args.repeats})")
    print("| mixer | " + " | ".join(f"N={n}" for n in lengths) + f" | ratio N={lengths[-1]}/N={lengths[0]} |")
    print("|---" * (len(lengths) + 2) + "|")
    ratios = {}
    for name in MIXERS:
        times = [time_mixer(name, args, n) for n in lengths]
        ratios[name] = times[-1] / times[0]
        print(f"| {name} | " + " | ".join(f"{1e3 * t:.2f}" for t in times) + f" | {ratios[name]:.1f} |")
    if ratios["pace_sketch"] > args.max_ratio:
        print(f"pace_sketch ratio {ratios['pace_sketch']:.1f} > {args.max_ratio}: not linear in N")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
