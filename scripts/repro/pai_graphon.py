"""PaI masks (Random, Magnitude, SNIP, GraSP) of a widening MLP vs the graphon the Factorised Saliency Model predicts.

    python scripts/repro/pai_graphon.py --out runs/repro/pai_graphon [--quick] [--methods random,snip]
                                        [--sparsity 0.8] [--scope layerwise] [--widths 16,32,64] [--grid 8]

No training: --steps is the number of widths 16, 32, ... (unless --widths), --batch-size the scoring rows,
--seq-len the tokens per topics row, --seeds the init seeds. Prints the result table and the files written
(results.md, results.json, convergence.png, graphons.png under --out). See docs/papers/pai_graphon.md.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import pai_graphon
from icml26zoo.repro.cli import budget_parser, parse_budget, print_results, run_main


def _ints(flag: str, text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(s) for s in text.split(",") if s)
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated integers, got {text!r}") from None


def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out="runs/repro/pai_graphon")
    parser.add_argument("--methods", default=",".join(pai_graphon.METHODS),
                        help=f"comma-separated criteria among {list(pai_graphon.METHODS)} (default: all)")
    parser.add_argument("--sparsity", type=float, default=0.8, help="pruned fraction in (0, 1) (default 0.8)")
    parser.add_argument("--scope", default="layerwise", help="layerwise (default) or global thresholds")
    parser.add_argument("--widths", help="comma-separated hidden widths (default: 16 * 2^k for k < --steps)")
    parser.add_argument("--grid", type=int, default=8, help="graphon cells per side (default 8)")
    parser.add_argument("--reference-width", type=int, help="width of the FSM reference network (default 2 x max)")
    parser.add_argument("--no-grasp-reinit", action="store_true", help="skip GraSP's Xavier re-initialisation")
    args, budget = parse_budget(parser, argv, quick=pai_graphon.QUICK, full=pai_graphon.FULL)
    results = pai_graphon.run(
        args.out, budget=budget, methods=tuple(m for m in args.methods.split(",") if m),
        widths=_ints("--widths", args.widths), sparsity=args.sparsity, scope=args.scope, grid=args.grid,
        reference_width=args.reference_width, grasp_reinit=not args.no_grasp_reinit, resume=args.resume)
    print_results(results)


if __name__ == "__main__":
    sys.exit(run_main(main))
