"""Massive activations and attention sinks: trains attention LMs per architecture variant and measures both.

    python scripts/repro/sinks.py --out runs/repro/sinks [--quick] [--variants pre,post,sandwich,none,dyt,sink,gate]
                                  [--num-layers 4] [--eval-rows 16] [--i0 8] [--eps 0.3] [--clamp-channels 2]
                                  [--steps 300] [--seeds 0,1] [--batch-size 8] [--seq-len 64] [--resume]

Variants: pre, post, sandwich, none (norm placements), dyt, gelu, sink, plus_one, gate (see
icml26zoo.repro.sinks_parts.VARIANTS). --quick defaults --variants to the notebook's pre,post.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import sinks
from icml26zoo.repro.cli import budget_parser, parse_budget, print_results, run_main


def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out="runs/repro/sinks")
    parser.add_argument("--variants", help=f"comma-separated variants (default {','.join(sinks.DEFAULT_VARIANTS)}; "
                                           f"with --quick {','.join(sinks.QUICK_VARIANTS)})")
    parser.add_argument("--num-layers", type=int, default=4, help="decoder layers of every model (>= 2)")
    parser.add_argument("--eval-rows", type=int, default=16, help="eval rows of T bytes for the measurements")
    parser.add_argument("--i0", type=int, default=8, help="sink statistics use queries i >= i0 (< T)")
    parser.add_argument("--eps", type=float, default=0.3, help="first-token mass above which a head is a sink head")
    parser.add_argument("--clamp-channels", type=int, default=2, help="spike channels zeroed by the I1 ablation")
    args, budget = parse_budget(parser, argv, quick=sinks.QUICK, full=sinks.FULL)
    default = sinks.QUICK_VARIANTS if args.quick else sinks.DEFAULT_VARIANTS
    variants = tuple(args.variants.split(",")) if args.variants is not None else default
    results = sinks.run(args.out, budget=budget, variants=variants, num_layers=args.num_layers,
                        eval_rows=args.eval_rows, i0=args.i0, eps=args.eps, clamp_channels=args.clamp_channels,
                        resume=args.resume)
    print_results(results)


if __name__ == "__main__":
    sys.exit(run_main(main))
