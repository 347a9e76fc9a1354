"""NC losses (arXiv 2605.20302): NTCE and NONL against cross-entropy on digits, accuracy and NC metrics.

    python scripts/repro/nc_losses.py --out /tmp/repro_nc_losses               # the FULL budget
    python scripts/repro/nc_losses.py --quick --out /tmp/nc_losses_quick      # what the notebook runs
    python scripts/repro/nc_losses.py --methods ce,ntce,nonl,nonl_etf,scl --steps 600 --seeds 0,1

Needs the `sklearn` extra (the digits). See docs/papers/nc_losses.md and icml26zoo.repro.nc_losses.run.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import nc_losses
from icml26zoo.repro.cli import budget_parser, comma_list, parse_budget, print_results, run_main, use_compilation_cache

DEFAULT_OUT = "runs/repro/nc_losses"


def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out=DEFAULT_OUT)
    parser.add_argument("--methods", help=f"comma-separated, from {','.join(nc_losses.METHODS)} "
                                          f"(default {','.join(nc_losses.DEFAULT_METHODS)}; --quick: ce,nonl)")
    parser.add_argument("--eval-points", type=int, help="evaluations after step 0 (default 6; --quick: 2)")
    args, budget = parse_budget(parser, argv, quick=nc_losses.QUICK, full=nc_losses.FULL)
    kwargs = dict(nc_losses.QUICK_ARGS) if args.quick else {}
    if args.eval_points is not None:
        kwargs["eval_points"] = args.eval_points
    if args.methods is not None:
        kwargs["methods"] = comma_list("--methods", args.methods)
    results = nc_losses.run(args.out, budget=budget, resume=args.resume, **kwargs)
    print_results(results)


if __name__ == "__main__":
    use_compilation_cache(sys.argv[1:], DEFAULT_OUT)
    sys.exit(run_main(main))
