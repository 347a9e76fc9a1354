"""Muon vs AdamW fine-tuning (full and LoRA) of an AdamW-pretrained tiny Llama: task loss, forgetting, stable rank.

    python scripts/repro/muon_lora.py --out /tmp/repro_muon_lora            # the FULL budget
    python scripts/repro/muon_lora.py --quick --optimizers muon --ranks 0,4 --d-model 64 --no-ablation
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import muon_lora
from icml26zoo.repro.cli import budget_parser, parse_budget, print_results, run_main


def _int_list(flag: str, text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated integers, got {text!r}") from None


def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out="runs/muon_lora")
    parser.add_argument("--optimizers", default="adamw,muon", help="fine-tuning optimizers (adamw, muon)")
    parser.add_argument("--ranks", help="LoRA ranks, 0 = full fine-tuning (default 0,4,16,64)")
    parser.add_argument("--d-model", type=int, default=muon_lora.D_MODEL, help="model width (default 128)")
    parser.add_argument("--no-ablation", action="store_true",
                        help="skip the Muon full fine-tuning ablation over ns_coeffs x ns_dtype")
    parser.add_argument("--adamw-lr", type=float, default=muon_lora.LEARNING_RATES["adamw"])
    parser.add_argument("--muon-lr", type=float, default=muon_lora.LEARNING_RATES["muon"])
    args, budget = parse_budget(parser, argv, quick=muon_lora.QUICK, full=muon_lora.FULL)
    optimizers = tuple(args.optimizers.split(","))
    rates = {"adamw": args.adamw_lr, "muon": args.muon_lr}
    ranks = _int_list("--ranks", args.ranks) or muon_lora.RANKS
    results = muon_lora.run(args.out, budget=budget, optimizers=optimizers, ranks=ranks,
                            learning_rates={k: v for k, v in rates.items() if k in optimizers or k == "muon"},
                            d_model=args.d_model, ablation=not args.no_ablation, resume=args.resume)
    print_results(results)


if __name__ == "__main__":
    sys.exit(run_main(main))
