"""mSGD vs cubic-damped SGD vs adaptive-friction SGD vs Adam vs cubic-damped Adam on test problems and a tiny GPT.

    python scripts/repro/cubic_damping.py --out /tmp/repro_cubic_damping       # the FULL budget
    python scripts/repro/cubic_damping.py --quick --out /tmp/cubic_quick       # what the notebook runs
    python scripts/repro/cubic_damping.py --methods msgd,cd_sgd --gpt-methods '' --problem-steps 1000

See docs/papers/cubic_damping.md and icml26zoo.repro.cubic_damping.run for the experiment.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import cubic_damping
from icml26zoo.repro.cli import budget_parser, comma_list, parse_budget, print_results, run_main

FLOAT_FLAGS = ("condition", "noise", "damping_multiple", "momentum", "gpt_sgd_lr", "gpt_adam_lr")
INT_FLAGS = ("problem_steps", "dim", "d_model")



def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out="runs/repro/cubic_damping")
    methods = ",".join(cubic_damping.METHODS)
    parser.add_argument("--methods", help=f"comma-separated, from {methods} (default: all), on the problems")
    parser.add_argument("--gpt-methods", help="comma-separated methods trained on the GPT ('' = none; default: "
                                              "--methods; --quick: " + ",".join(cubic_damping.QUICK_ARGS["gpt_methods"])
                                              + ")")
    parser.add_argument("--problems", help=f"comma-separated, from {','.join(cubic_damping.PROBLEMS)} ('' = none)")
    for flag in INT_FLAGS:
        parser.add_argument("--" + flag.replace("_", "-"), type=int, help=f"run()'s {flag}")
    for flag in FLOAT_FLAGS:
        parser.add_argument("--" + flag.replace("_", "-"), type=float, help=f"run()'s {flag}")
    args, budget = parse_budget(parser, argv, quick=cubic_damping.QUICK, full=cubic_damping.FULL)
    kwargs = dict(cubic_damping.QUICK_ARGS) if args.quick else {}
    for flag in ("methods", "gpt_methods", "problems"):
        if getattr(args, flag) is not None:
            kwargs[flag] = comma_list("--" + flag.replace("_", "-"), getattr(args, flag))
    for flag in INT_FLAGS + FLOAT_FLAGS:
        if getattr(args, flag) is not None:
            kwargs[flag] = getattr(args, flag)
    results = cubic_damping.run(args.out, budget=budget, resume=args.resume, **kwargs)
    print_results(results)


if __name__ == "__main__":
    sys.exit(run_main(main))
