"""MDN (arXiv 2605.05838) vs Gated DeltaNet, KDA, Mamba2 and DeltaNet: MQAR recall vs pairs, bits per byte on the
byte corpus, and the spectral radius of MDN's gated momentum transition (icml26zoo.repro.mdn).

    python scripts/repro/mdn.py --out runs/repro/mdn [--quick] [--mixers mdn,deltanet] [--pairs 4,8,16]
                                [--no-bytes] [--num-keys 24] [--implementation reference] [--steps N] ...

Compiled programs are cached under <out>/jax_cache (unless a JAX compilation cache is already configured), so
the MQAR cells of one mixer, which share their shapes, compile once.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import mdn
from icml26zoo.repro.cli import budget_parser, parse_budget, print_results, run_main, use_compilation_cache


def _names(text: str | None) -> list[str] | None:
    return None if text is None else [name.strip() for name in text.split(",") if name.strip()]


def _ints(flag: str, text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(value) for value in text.split(",")]
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated integers, got {text!r}") from None


def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out="runs/repro/mdn")
    parser.add_argument("--mixers", help=f"comma-separated, from {','.join(mdn.MIXERS)} (default: the budget's plan)")
    parser.add_argument("--pairs", help="comma-separated MQAR pair counts (default: 4,8,16; QUICK: 4)")
    parser.add_argument("--no-bytes", action="store_true", help="skip the byte-corpus (bits per byte) cells")
    parser.add_argument("--num-keys", type=int, default=24, help="MQAR keys and values, 1..31 (default 24)")
    parser.add_argument("--implementation", default="reference",
                        help="mixer implementation: reference, xla or default (each op's own; default reference)")
    args, budget = parse_budget(parser, argv, quick=mdn.QUICK, full=mdn.FULL)
    results = mdn.run(
        args.out, budget=budget, mixers=_names(args.mixers), pairs=_ints("--pairs", args.pairs),
        byte_corpus=False if args.no_bytes else None, num_keys=args.num_keys,
        implementation=None if args.implementation == "default" else args.implementation, resume=args.resume,
    )
    print_results(results)


if __name__ == "__main__":
    use_compilation_cache(sys.argv[1:], "runs/repro/mdn")
    sys.exit(run_main(main))
