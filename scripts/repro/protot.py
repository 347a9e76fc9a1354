"""Reproduce ProtoT (arXiv 2602.11852, a reconstruction): parameter-matched byte LMs, prototype read-out and edits.

    python scripts/repro/protot.py --out runs/repro/protot            # FULL: 1000 steps per cell (~15 CPU-minutes)
    python scripts/repro/protot.py --quick --mixers protot            # what the notebook runs

Prints the results table and the paths written (results.md, results.json, loss_curves.png,
prototype_usage.png under --out). See docs/papers/protot.md.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import protot
from icml26zoo.repro.cli import budget_parser, parse_budget, print_results, run_main


def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out="runs/repro/protot")
    parser.add_argument("--mixers", default=",".join(protot.MIXERS),
                        help=f"comma-separated mixers to train, including protot (default {','.join(protot.MIXERS)})")
    parser.add_argument("--edit-layer", type=int, help="ProtoT layer to edit (default: the last)")
    parser.add_argument("--edit-prototype", type=int,
                        help="base prototype to edit (default: two chosen by rule: the one the prompt writes to "
                        "most, and the one whose strongest writers are most often whitespace)")
    parser.add_argument("--amplify", type=float, default=4.0, help="amplify edit: read weights x (1 + this)")
    parser.add_argument("--prompt", default="    def __init__(self", help="prompt of the edited generations")
    parser.add_argument("--new-tokens", type=int, default=48, help="bytes generated per variant, prompt and key")
    parser.add_argument("--sample-keys", type=int, default=4,
                        help="PRNG keys of the sampled generations, each shared by every variant")
    args, budget = parse_budget(parser, argv, quick=protot.QUICK, full=protot.FULL)
    results = protot.run(
        args.out, budget=budget, mixers=tuple(m for m in args.mixers.split(",") if m),
        edit_layer=args.edit_layer, edit_prototype=args.edit_prototype, amplify=args.amplify, prompt=args.prompt,
        new_tokens=args.new_tokens, sample_keys=args.sample_keys, resume=args.resume,
    )
    print_results(results)


if __name__ == "__main__":
    sys.exit(run_main(main))
