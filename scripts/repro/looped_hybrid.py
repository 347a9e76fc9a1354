"""Looped transformer on Dyck-2 (arXiv 2601.01754) and hybrid linear/full-attention stacks on function composition
(arXiv 2602.01763): accuracy against length.

    python scripts/repro/looped_hybrid.py --out /tmp/repro_looped_hybrid             # the FULL budget
    python scripts/repro/looped_hybrid.py --quick --out /tmp/looped_hybrid_quick     # what the notebook runs
    python scripts/repro/looped_hybrid.py --loops log2,1,4 --patterns deltanet,attention --values 4,8

--seq-len sets the Dyck training rows (string + padding + <cls>). See docs/papers/looped_cfl.md,
docs/papers/hybrid_attention.md and icml26zoo.repro.looped_hybrid.run for the experiment.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import looped_hybrid
from icml26zoo.repro.cli import budget_parser, comma_list, parse_budget, print_results, run_main, use_compilation_cache

DEFAULT_OUT = "runs/repro/looped_hybrid"


def _loop(value: str) -> int | str:
    return int(value) if value.isdigit() else value


def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out=DEFAULT_OUT)
    parser.add_argument("--loops", help="the looped model's loop settings, comma-separated integers or log2/linear "
                                        "(default log2,1; --quick: log2)")
    parser.add_argument("--patterns", help="hybrid patterns separated by ';', each comma-separated mixer names "
                                           "(default 'deltanet,attention;attention'; --quick: the first)")
    parser.add_argument("--values", help="function-composition table sizes n, comma-separated (default 4,8,16)")
    parser.add_argument("--lengths", help="Dyck evaluation string lengths, comma-separated (default 8,...,32)")
    parser.add_argument("--padding", type=int, help="Dyck <pad> tokens per row (default 8; --quick: 4)")
    args, budget = parse_budget(parser, argv, quick=looped_hybrid.QUICK, full=looped_hybrid.FULL)
    kwargs = dict(looped_hybrid.QUICK_ARGS) if args.quick else {}
    if args.loops is not None:
        kwargs["loops"] = tuple(_loop(v) for v in comma_list("--loops", args.loops))
    if args.patterns is not None:
        kwargs["patterns"] = tuple(p.strip() for p in args.patterns.split(";"))
    if args.values is not None:
        kwargs["funccomp_values"] = comma_list("--values", args.values, int)
    if args.lengths is not None:
        kwargs["dyck_eval_lengths"] = comma_list("--lengths", args.lengths, int)
    if args.padding is not None:
        kwargs["dyck_padding"] = args.padding
    results = looped_hybrid.run(args.out, budget=budget, resume=args.resume, **kwargs)
    print_results(results)


if __name__ == "__main__":
    use_compilation_cache(sys.argv[1:], DEFAULT_OUT)
    sys.exit(run_main(main))
