"""Softmax attention vs FoX vs FiX at matched parameters (byte corpus and MQAR) and FoX's length extrapolation.

    python scripts/repro/fox_fix.py --out /tmp/repro_fox_fix                 # the FULL budget
    python scripts/repro/fox_fix.py --quick --out /tmp/fox_fix_quick        # what the notebook runs
    python scripts/repro/fox_fix.py --variants fox,fix --tasks mqar --steps 100

See docs/papers/fox_fix.md and icml26zoo.repro.fox_fix.run for the experiment.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import fox_fix
from icml26zoo.repro.cli import budget_parser, comma_list, parse_budget, print_results, run_main


def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out="runs/repro/fox_fix")
    parser.add_argument("--variants", help=f"comma-separated, from {','.join(fox_fix.VARIANTS)} (default: all; "
                                           f"--quick: {','.join(fox_fix.QUICK_ARGS['variants'])})")
    parser.add_argument("--tasks", help="comma-separated, from pystdlib,mqar (default: both; --quick: pystdlib)")
    parser.add_argument("--extrapolation", help="comma-separated length factors >= 2, e.g. 2,4 (default 2,4; "
                                                "'' = none)")
    parser.add_argument("--d-model", type=int, default=64, help="model width, a multiple of 8 (default 64)")
    parser.add_argument("--eval-rows", type=int, help="rows of the longest length per extrapolation eval (default 8)")
    parser.add_argument("--mqar-pairs", type=int, default=8, help="key-value pairs per MQAR example (default 8)")
    args, budget = parse_budget(parser, argv, quick=fox_fix.QUICK, full=fox_fix.FULL)
    kwargs = dict(fox_fix.QUICK_ARGS) if args.quick else {}
    if args.variants is not None:
        kwargs["variants"] = comma_list("--variants", args.variants)
    if args.tasks is not None:
        kwargs["tasks"] = comma_list("--tasks", args.tasks)
    if args.extrapolation is not None:
        kwargs["extrapolation"] = comma_list("--extrapolation", args.extrapolation, int)
    if args.eval_rows is not None:
        kwargs["eval_rows"] = args.eval_rows
    results = fox_fix.run(args.out, budget=budget, d_model=args.d_model, mqar_pairs=args.mqar_pairs,
                          resume=args.resume, **kwargs)
    print_results(results)


if __name__ == "__main__":
    sys.exit(run_main(main))
