"""The command line every `scripts/repro/<paper>.py` shares: where to write, which budget, resume or not.

    python scripts/repro/<paper>.py --out runs/repro/<paper> [--quick] [--steps N] [--seeds 0,1,2]
                                    [--batch-size B] [--seq-len T] [--resume]

`--quick` selects the paper's QUICK budget (the one its notebook and the test suite run); the other flags
override single fields of the chosen budget. Bad values exit with a one-line error naming the flag.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
from collections.abc import Callable, Sequence

import jax

from icml26zoo.repro.common import Budget, Results

__all__ = ["budget_parser", "comma_list", "parse_budget", "print_results", "run_main", "use_compilation_cache"]


def budget_parser(description: str, *, default_out: str) -> argparse.ArgumentParser:
    """A parser with the shared flags; a script adds its own (e.g. `--mixers`) before `parse_budget`."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", default=default_out, help=f"run directory (default {default_out})")
    parser.add_argument("--quick", action="store_true", help="the QUICK budget the notebook runs")
    parser.add_argument("--steps", type=int, help="training steps per cell")
    parser.add_argument("--seeds", help="comma-separated seeds, e.g. 0,1,2")
    parser.add_argument("--batch-size", type=int, help="rows per step")
    parser.add_argument("--seq-len", type=int, help="tokens per row")
    parser.add_argument("--resume", action="store_true",
                        help="continue the experiment in an existing --out (an error if it does not exist)")
    return parser


def parse_budget(parser: argparse.ArgumentParser, argv: Sequence[str] | None, *, quick: Budget,
                 full: Budget) -> tuple[argparse.Namespace, Budget]:
    """Parses `argv`; returns the namespace and the budget (QUICK or full, with the flags' overrides).
    A bad flag value exits through `parser.error` with the flag's name and the value."""
    args = parser.parse_args(argv)
    budget = quick if args.quick else full
    changes = {}
    for field in ("steps", "batch_size", "seq_len"):
        value = getattr(args, field)
        if value is not None:
            changes[field] = value
    if args.seeds is not None:
        try:
            changes["seeds"] = tuple(int(s) for s in args.seeds.split(","))
        except ValueError:
            parser.error(f"--seeds must be comma-separated integers, got {args.seeds!r}")
    try:
        budget = dataclasses.replace(budget, **changes)
    except ValueError as error:
        parser.error(str(error).replace("budget.", "--").replace("_", "-"))
    return args, budget


def run_main(main: Callable[[Sequence[str] | None], object], argv: Sequence[str] | None = None) -> int:
    """Runs a script's `main`, turning a ValueError or FileNotFoundError (bad input) into a one-line error
    on stderr and exit status 2, as the trainer's CLI does."""
    import sys

    try:
        main(argv)
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


def print_results(results: Results) -> None:
    """Prints a reproduction's markdown table and the paths of the files it wrote."""
    print(results.markdown)
    for name, path in results.paths.items():
        print(f"{name}: {path}")


def comma_list(flag: str, text: str, kind: type = str) -> tuple:
    """A command-line list "a,b,c" as a tuple of `kind` (str, int or float), blanks dropped; ValueError naming
    `flag` when an entry is not a `kind`."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    try:
        return tuple(kind(part) for part in parts)
    except ValueError:
        what = "integers" if kind is int else "numbers"
        raise ValueError(f"{flag} must be comma-separated {what}, got {text!r}") from None

def use_compilation_cache(argv: Sequence[str], default_out: str) -> None:
    """Caches compiled programs under `<--out>/jax_cache` unless a JAX compilation cache is configured already,
    so reruns and later seeds reuse them. Only a script's command line calls it (not its `main`), since it
    changes a process-wide JAX setting."""
    if jax.config.jax_compilation_cache_dir is not None:
        return
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--out", default=default_out)
    args, _ = parser.parse_known_args(argv)
    jax.config.update("jax_compilation_cache_dir", str(pathlib.Path(args.out) / "jax_cache"))
