"""EDEN: Llama, Mamba and Hyena at three sizes on synthetic nucleotides, power-law fits and motif completion.

    python scripts/repro/eden.py --out runs/repro/eden [--quick] [--archs llama,mamba,hyena]
                                 [--sizes tiny,small,medium] [--motif-prefix 4] [--no-compile-cache]
                                 [--steps N] [--seeds 0,1,2] [--batch-size B] [--seq-len T] [--resume]

`--quick` runs the notebook's budget and grid (`eden.QUICK`, `eden.QUICK_GRID`) unless --archs/--sizes say
otherwise. The cells of one architecture and size differ only in their seed, so the script keeps XLA's
persistent compilation cache in <out>/jax_cache (the seeds after the first reuse the compiled steps);
--no-compile-cache turns that off.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import eden
from icml26zoo.repro.cli import budget_parser, parse_budget, run_main, use_compilation_cache


def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out="runs/repro/eden")
    parser.add_argument("--archs", help=f"comma-separated, from {list(eden.ARCHS)} (default all)")
    parser.add_argument("--sizes", help=f"comma-separated, from {list(eden.SIZES)} (default all)")
    parser.add_argument("--motif-prefix", type=int, default=4, help="motif bases shown before completion (4)")
    parser.add_argument("--no-compile-cache", action="store_true", help="do not cache XLA programs in <out>")
    args, budget = parse_budget(parser, argv, quick=eden.QUICK, full=eden.FULL)
    grid = dict(eden.QUICK_GRID) if args.quick else {"archs": eden.ARCHS, "sizes": eden.SIZES}
    for name in ("archs", "sizes"):
        if getattr(args, name) is not None:
            grid[name] = tuple(getattr(args, name).split(","))
    results = eden.run(args.out, budget=budget, motif_prefix=args.motif_prefix, resume=args.resume, **grid)
    print(results.markdown)
    for path in results.paths.values():
        print(f"wrote {path}")


if __name__ == "__main__":
    # A process-wide JAX setting, so only the command line turns it on, never `main` (which tests call).
    if "--no-compile-cache" not in sys.argv[1:]:
        use_compilation_cache(sys.argv[1:], "runs/repro/eden")
    sys.exit(run_main(main))
