"""The experiments' command line, `python -m icml26zoo.repro` (see `__main__`):

    python -m icml26zoo.repro --list                                   # every experiment, one line each
    python -m icml26zoo.repro <name> --help                            # its options, types and defaults
    python -m icml26zoo.repro <name> [--smoke | --quick] [--out DIR] [--resume]
                              [--steps N] [--seeds 0,1,2] [--batch-size B] [--seq-len T] [option=value ...]
    python -m icml26zoo.repro leaderboard --quick                      # the leaderboard is an experiment too

The FULL budget is the default (the run a paper page reports); `--quick` is what a notebook runs, `--smoke` a
few steps of every code path. `option=value` sets one of the experiment's options (`--help` lists them),
parsed by its type: numbers, true/false, none, or comma-separated lists (`variants=fox,fix`). Results go to
`--out` (default `runs/repro/<name>`): results.md, results.json and the PNG figures. `--resume` continues an
interrupted run there (finished cells are reused). A user error (an unknown name or option, a bad value, an
unwritable --out, a run directory made by another experiment, a missing extra) prints one line `error: ...` and
exits with status 2; `--debug` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import sys
import types
import typing
from collections.abc import Sequence
from typing import Any

from icml26zoo.extras import MissingExtraError, require_extras
from icml26zoo.repro import registry
from icml26zoo.repro.common import Budget, Results
from icml26zoo.train.logs import configure_logs
from icml26zoo.validation import did_you_mean

PROG = "python -m icml26zoo.repro"


class UsageError(ValueError):
    """A bad command line: printed as one line, exit status 2."""


def main(argv: Sequence[str] | None = None, *, compilation_cache: bool = False) -> int:
    """Runs the command line `argv` (default sys.argv[1:]); returns the exit status. `compilation_cache`
    caches compiled programs under `<--out>/jax_cache` (the console does; it changes a process-wide JAX
    setting, so a caller inside a larger program leaves it off)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        return _main([a for a in argv if a != "--debug"], compilation_cache=compilation_cache)
    except (ValueError, FileNotFoundError, NotADirectoryError, PermissionError, MissingExtraError) as error:
        if debug:
            raise
        print(one_line(error), file=sys.stderr)
        return 2


def one_line(error: BaseException) -> str:
    """`error: <message>` on a single line."""
    return "error: " + " ".join(str(error).split())


def _main(argv: list[str], *, compilation_cache: bool) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        print("experiments: " + ", ".join(registry.names()))
        return 0
    if argv[0] == "--list":
        print(listing())
        return 0
    if argv[0].startswith("-"):
        raise UsageError(f"the first argument must be an experiment name or --list, got {argv[0]!r}; "
                         f"experiments: {', '.join(registry.names())}")
    spec = registry.get(argv[0])
    parser = _parser(spec)
    if any(a in ("-h", "--help") for a in argv[1:]):
        parser.print_help()
        return 0
    args, extra = parser.parse_known_args(argv[1:])
    unknown_flags = [a for a in extra if a.startswith("-")]
    if unknown_flags:
        raise UsageError(f"unknown flag {unknown_flags[0]!r}; flags: --smoke --quick --out --resume --steps "
                         f"--seeds --batch-size --seq-len --debug (see {PROG} {spec.name} --help)")
    budget_name = "smoke" if args.smoke else "quick" if args.quick else "full"
    budget = budget_with_flags(spec.budget(budget_name), args)
    options = dict(spec.arguments[budget_name]) | parse_options(spec, extra)
    out = pathlib.Path(args.out or f"runs/repro/{spec.name}")
    check_out(out, resume=args.resume)
    require_extras("train", *spec.extras, what=f"experiment {spec.name!r}")
    configure_logs()
    if compilation_cache:
        use_compilation_cache(out)
    print(f"{spec.name}: {budget_name} budget ({budget.describe()}) -> {out}", flush=True)
    results = spec.run(out, budget=budget, resume=args.resume, **options)
    print_results(results)
    return 0


def listing() -> str:
    """One line per experiment: name, extras beyond [train], summary."""
    lines = []
    for spec in registry.specs():
        extras = f" [{','.join(spec.extras)}]" if spec.extras else ""
        lines.append(f"{spec.name:22s}{extras:12s} {spec.summary}")
    return "\n".join(lines)


def _parser(spec: registry.ExperimentSpec) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"{PROG} {spec.name}", description=spec.summary,
                                     epilog=_options_help(spec), formatter_class=argparse.RawDescriptionHelpFormatter)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--smoke", action="store_true", help=f"the SMOKE budget ({spec.budgets['smoke'].describe()})")
    size.add_argument("--quick", action="store_true", help=f"the QUICK budget ({spec.budgets['quick'].describe()})")
    parser.add_argument("--out", help=f"run directory (default runs/repro/{spec.name})")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in an existing --out (an error if it does not exist)")
    parser.add_argument("--steps", help="override the budget's training steps per cell")
    parser.add_argument("--seeds", help="override the budget's seeds, comma-separated (e.g. 0,1,2)")
    parser.add_argument("--batch-size", help="override the budget's rows per step")
    parser.add_argument("--seq-len", help="override the budget's tokens per row")
    return parser


def _options_help(spec: registry.ExperimentSpec) -> str:
    types_ = spec.option_types()
    lines = [f"options (option=value; FULL budget: {spec.budgets['full'].describe()}):"]
    for name, parameter in spec.options().items():
        lines.append(f"  {name} ({_type_name(types_[name])}, default {_show(parameter.default)})")
    for budget_name in ("quick", "smoke"):
        if spec.arguments[budget_name]:
            shown = ", ".join(f"{k}={_show(v)}" for k, v in spec.arguments[budget_name].items())
            lines.append(f"--{budget_name} also sets: {shown}")
    if spec.page:
        lines.append(f"page: {spec.page}")
    return "\n".join(lines)


def _show(value: Any) -> str:
    if isinstance(value, tuple | list):
        return ",".join(str(v) for v in value) or "''"
    return str(value)


def _type_name(hint: Any) -> str:
    if isinstance(hint, type):
        return hint.__name__
    return str(hint).replace("typing.", "").replace("collections.abc.", "")


def budget_with_flags(budget: Budget, args: argparse.Namespace) -> Budget:
    """`budget` with the --steps/--seeds/--batch-size/--seq-len overrides; UsageError naming the flag."""
    changes: dict[str, Any] = {}
    for field in ("steps", "batch_size", "seq_len"):
        raw = getattr(args, field)
        if raw is not None:
            changes[field] = _parse_int(f"--{field.replace('_', '-')}", raw)
    if args.seeds is not None:
        changes["seeds"] = tuple(_parse_int("--seeds", part) for part in args.seeds.split(",") if part.strip())
    try:
        return dataclasses.replace(budget, **changes)
    except ValueError as error:
        message = str(error)
        for field in ("steps", "batch_size", "seq_len", "seeds"):
            message = message.replace(f"budget.{field}", f"--{field.replace('_', '-')}")
        raise UsageError(message) from None


def _parse_int(flag: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise UsageError(f"{flag} must be an integer, got {raw!r}") from None


def parse_options(spec: registry.ExperimentSpec, items: Sequence[str]) -> dict[str, Any]:
    """`option=value` strings as keyword arguments of the experiment's run, each parsed by its annotation."""
    types_ = spec.option_types()
    options: dict[str, Any] = {}
    for item in items:
        key, equals, raw = item.partition("=")
        if not equals or not key:
            raise UsageError(f"{item!r} must look like option=value; options of {spec.name}: {list(types_)}")
        if key not in types_:
            raise UsageError(f"{spec.name} has no option {key!r}{did_you_mean(key, types_)}; "
                             f"options: {list(types_)}")
        options[key] = parse_value(key, raw, types_[key])
    return options


def parse_value(key: str, raw: str, hint: Any) -> Any:
    """`raw` as a value of type `hint`: int, float, bool, str, None, a union of those, or a sequence of them
    written comma-separated ('' is the empty sequence). UsageError naming `key` otherwise."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        members = typing.get_args(hint)
        if type(None) in members and raw.lower() in ("none", "null"):
            return None
        for member in (m for m in members if m is not type(None)):
            try:
                return parse_value(key, raw, member)
            except UsageError:
                continue
        raise UsageError(f"option {key} expects {_type_name(hint)}, got {raw!r}")
    if origin in (tuple, list, Sequence, typing.Sequence) or origin is getattr(typing, "Sequence", None):
        args = [a for a in typing.get_args(hint) if a is not Ellipsis] or [str]
        parts = [part.strip() for part in raw.split(",") if part.strip()]
        return tuple(parse_value(key, part, args[0]) for part in parts)
    if hint is bool:
        if raw.lower() in ("true", "1", "yes"):
            return True
        if raw.lower() in ("false", "0", "no"):
            return False
        raise UsageError(f"option {key} expects true or false, got {raw!r}")
    if hint in (int, float):
        try:
            return hint(raw)
        except ValueError:
            raise UsageError(f"option {key} expects {hint.__name__}, got {raw!r}") from None
    if hint in (str, Any):
        return raw
    raise UsageError(f"option {key} ({_type_name(hint)}) cannot be set from the command line")


def check_out(out: pathlib.Path, *, resume: bool) -> None:
    """--out must be a directory we can write (or create); with --resume it must exist already."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {str(out)!r} exists and is not a directory")
    if resume and not out.is_dir():
        raise UsageError(f"--out {str(out)!r} does not exist: there is nothing to resume (drop --resume)")
    existing = out
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"--out {str(out)!r} is not writable ({str(existing)!r} does not allow writing)")


def use_compilation_cache(out: pathlib.Path) -> None:
    """Caches compiled programs under `<out>/jax_cache` unless a JAX compilation cache is configured already,
    so a resumed run and later seeds reuse them."""
    import jax

    if jax.config.jax_compilation_cache_dir is None:
        jax.config.update("jax_compilation_cache_dir", str(out / "jax_cache"))


def print_results(results: Results) -> None:
    """The markdown table, then the path of every file written."""
    print(results.markdown)
    for name, path in results.paths.items():
        print(f"{name}: {path}")

