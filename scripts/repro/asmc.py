"""ASMC particle decoding (p^alpha target) vs sampling and best-of-N on synthetic addition, at equal decode steps.

    python scripts/repro/asmc.py --out /tmp/repro_asmc                   # the FULL budget
    python scripts/repro/asmc.py --quick --out /tmp/asmc_quick          # what the notebook runs
    python scripts/repro/asmc.py --particles 8,32 --alphas 4 --schemes systematic --problems 100

Compiled programs are cached under <out>/jax_cache (unless a JAX compilation cache is already configured). See
docs/papers/asmc.md and icml26zoo.repro.asmc.run for the experiment.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import asmc
from icml26zoo.repro.cli import budget_parser, comma_list, parse_budget, print_results, run_main, use_compilation_cache

DEFAULT_OUT = "runs/repro/asmc"


def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out=DEFAULT_OUT)
    parser.add_argument("--particles", help="comma-separated particle counts N (default 4,8,16; --quick: 8)")
    parser.add_argument("--alphas", help="comma-separated powers alpha > 1 (default 2,4; --quick: 4)")
    parser.add_argument("--schemes", help=f"comma-separated, from {','.join(asmc.SCHEMES)} (default: all; "
                                          "--quick: systematic)")
    parser.add_argument("--proposals", help=f"comma-separated, from {','.join(asmc.PROPOSALS)} (default: both)")
    parser.add_argument("--problems", type=int, help="held-out problems per seed (default 200; --quick: 12)")
    parser.add_argument("--block-size", type=int, default=1, help="tokens between resampling checks (default 1)")
    parser.add_argument("--collapse-threshold", type=float, default=0.3,
                        help="ESS / N below which the adaptive population doubles (default 0.3)")
    args, budget = parse_budget(parser, argv, quick=asmc.QUICK, full=asmc.FULL)
    kwargs = dict(asmc.QUICK_ARGS) if args.quick else {}
    if args.particles is not None:
        kwargs["particles"] = comma_list("--particles", args.particles, int)
    if args.alphas is not None:
        kwargs["alphas"] = comma_list("--alphas", args.alphas, float)
    if args.schemes is not None:
        kwargs["schemes"] = comma_list("--schemes", args.schemes)
    if args.proposals is not None:
        kwargs["proposals"] = comma_list("--proposals", args.proposals)
    if args.problems is not None:
        kwargs["num_problems"] = args.problems
    results = asmc.run(args.out, budget=budget, block_size=args.block_size,
                       collapse_threshold=args.collapse_threshold, resume=args.resume, **kwargs)
    print_results(results)


if __name__ == "__main__":
    use_compilation_cache(sys.argv[1:], DEFAULT_OUT)
    sys.exit(run_main(main))
