"""YAQA (arXiv 2505.22988) vs GPTQ/LDLQ vs RTN: output KL of a quantized tiny LM at 2-4 bits.

    python scripts/repro/yaqa.py --out /tmp/repro_yaqa              # the FULL budget
    python scripts/repro/yaqa.py --quick --out /tmp/yaqa_quick      # a fast smoke run (2 bits only)
    python scripts/repro/yaqa.py --methods rtn,yaqa --bits 2,3 --calibration-batches 32

See docs/papers/yaqa.md and icml26zoo.repro.yaqa.run for the experiment.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import yaqa
from icml26zoo.repro.cli import budget_parser, comma_list, parse_budget, print_results, run_main, use_compilation_cache

DEFAULT_OUT = "runs/repro/yaqa"


def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out=DEFAULT_OUT)
    parser.add_argument("--methods", help=f"comma-separated, from {','.join(yaqa.METHODS)} (default: all)")
    parser.add_argument("--bits", help="comma-separated bit widths from 2,3,4 (default: all; --quick: 2)")
    parser.add_argument("--calibration-batches", type=int, help="training batches for the Hessians (default 16)")
    parser.add_argument("--eval-batches", type=int, help="held-out batches for the KL (default 8)")
    parser.add_argument("--d-model", type=int, default=64, help="the LM's width (default 64)")
    args, budget = parse_budget(parser, argv, quick=yaqa.QUICK, full=yaqa.FULL)
    kwargs = dict(yaqa.QUICK_ARGS) if args.quick else {}
    if args.methods is not None:
        kwargs["methods"] = comma_list("--methods", args.methods)
    if args.bits is not None:
        kwargs["bits"] = comma_list("--bits", args.bits, int)
    if args.calibration_batches is not None:
        kwargs["calibration_batches"] = args.calibration_batches
    if args.eval_batches is not None:
        kwargs["eval_batches"] = args.eval_batches
    results = yaqa.run(args.out, budget=budget, d_model=args.d_model, resume=args.resume, **kwargs)
    print_results(results)


if __name__ == "__main__":
    use_compilation_cache(sys.argv[1:], DEFAULT_OUT)
    sys.exit(run_main(main))
