"""The experiment registry: every paper's experiment, study and the leaderboard, each under one name.

An experiment is a function `run(run_dir, *, budget, resume=False, **options) -> Results` that writes
`results.md`, `results.json` and its figures (PNG) into `run_dir` through `repro.common.Experiment`. It
registers itself with its three budgets:

    @register_experiment("fox_fix", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=..., quick_args=...)
    def run(run_dir, *, budget=FULL, variants=VARIANTS, ..., resume=False) -> Results: ...

- `smoke`: a few steps, every code path, seconds on a CPU; what the test suite runs (the experiment contract
  and the notebooks' SMOKE mode).
- `quick`: what a notebook runs by default, a few minutes at most on a CPU (`--quick`).
- `full`: the run a paper page reports (the default).

`smoke_args` / `quick_args` are the options each small budget runs with (usually a smaller grid). Every
option is a keyword of `run` with a default and a type annotation, so the command line
(`python -m icml26zoo.repro <name> option=value`) parses it by its type and a notebook passes it by name.

Registered experiments are found through `INDEX` (name -> module), so looking one up imports only its module;
`names()` lists them all. The registered `run` is wrapped: it rejects unknown options and a `run_dir` made by
another experiment (its `experiment.json`) with a ValueError naming them, before anything is written.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import json
import pathlib
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from icml26zoo.extras import require_extras
from icml26zoo.repro.common import MARKER, Budget, Results, running_experiment
from icml26zoo.validation import did_you_mean

__all__ = ["BUDGET_NAMES", "INDEX", "ExperimentSpec", "check_run_dir", "get", "names",
           "register_experiment", "run", "specs"]

BUDGET_NAMES = ("smoke", "quick", "full")

# name -> module that registers it. Looking a name up imports only that module (an experiment's optional
# extra is needed only when it runs). tests/repro/test_experiments.py checks that every module calling
# `register_experiment` is listed here under the name it registers.
INDEX: dict[str, str] = {
    "acda": "icml26zoo.repro.acda",
    "adam_spikes": "icml26zoo.repro.adam_spikes",
    "apb": "icml26zoo.repro.apb",
    "api": "icml26zoo.repro.api",
    "apt": "icml26zoo.repro.apt",
    "asmc": "icml26zoo.repro.asmc",
    "atl_fgd": "icml26zoo.repro.atl_fgd",
    "camp": "icml26zoo.repro.camp",
    "circulation": "icml26zoo.repro.circulation",
    "confsmoe_ablation": "icml26zoo.repro.confsmoe_ablation",
    "conglude": "icml26zoo.repro.conglude",
    "cubic_damping": "icml26zoo.repro.cubic_damping",
    "diag_cfm": "icml26zoo.repro.diag_cfm",
    "divergence_decoding": "icml26zoo.repro.divergence_decoding",
    "dp_mechanisms": "icml26zoo.repro.dp_mechanisms",
    "eden": "icml26zoo.repro.eden",
    "fox_fix": "icml26zoo.repro.fox_fix",
    "fp8_rank_aware": "icml26zoo.repro.fp8_rank_aware",
    "gcf": "icml26zoo.repro.gcf",
    "geocoupling": "icml26zoo.repro.geocoupling",
    "gnn_missing": "icml26zoo.repro.gnn_missing",
    "goat": "icml26zoo.repro.goat",
    "hard_kv": "icml26zoo.repro.hard_kv",
    "ipw_scoring": "icml26zoo.repro.ipw_scoring",
    "leaderboard": "icml26zoo.repro.leaderboard",
    "looped_hybrid": "icml26zoo.repro.looped_hybrid",
    "mdn": "icml26zoo.repro.mdn",
    "moe_routing": "icml26zoo.repro.moe_routing",
    "muon_lora": "icml26zoo.repro.muon_lora",
    "nc_losses": "icml26zoo.repro.nc_losses",
    "notime": "icml26zoo.repro.notime",
    "pace": "icml26zoo.repro.pace",
    "pai_graphon": "icml26zoo.repro.pai_graphon",
    "pbs_attn": "icml26zoo.repro.pbs_attn",
    "pcfg_probing": "icml26zoo.repro.pcfg_probing",
    "platonic": "icml26zoo.repro.platonic",
    "pmdo": "icml26zoo.repro.pmdo",
    "protein_tokenizer": "icml26zoo.repro.protein_tokenizer",
    "protot": "icml26zoo.repro.protot",
    "puma": "icml26zoo.repro.puma",
    "rl_vs_sft": "icml26zoo.repro.rl_vs_sft",
    "sam_polyak": "icml26zoo.repro.sam_polyak",
    "saqnn": "icml26zoo.repro.saqnn",
    "sinks": "icml26zoo.repro.sinks",
    "sola": "icml26zoo.repro.sola",
    "spikenet": "icml26zoo.repro.spikenet",
    "ssd": "icml26zoo.repro.ssd",
    "surge": "icml26zoo.repro.surge",
    "talda": "icml26zoo.repro.talda",
    "target_update": "icml26zoo.repro.target_update",
    "xr1": "icml26zoo.repro.xr1",
    "yaqa": "icml26zoo.repro.yaqa",
}

_REGISTERED: dict[str, ExperimentSpec] = {}


@dataclasses.dataclass(frozen=True)
class ExperimentSpec:
    """One registered experiment: its name, its wrapped `run`, its budgets and the options of each budget.

    Attributes:
      name: the registry name (`python -m icml26zoo.repro <name>`).
      run: the registered function, wrapped (see the module docstring).
      budgets: {"smoke", "quick", "full"} -> `Budget`.
      arguments: budget name -> the options that budget runs with (missing: the defaults of `run`).
      summary: one line (the first line of the module's docstring).
      page: the paper page under docs/ that reports the FULL run, or None.
      extras: optional pip extras the experiment needs beyond [train] (e.g. ("rl",)).
      volatile: result columns measured from the machine (throughput, timings): a resumed run may differ
        there, nowhere else.
    """

    name: str
    run: Callable[..., Results]
    budgets: Mapping[str, Budget]
    arguments: Mapping[str, Mapping[str, Any]]
    summary: str
    page: str | None = None
    extras: tuple[str, ...] = ()
    volatile: tuple[str, ...] = ()

    def budget(self, name: str) -> Budget:
        """The budget called `name` (one of BUDGET_NAMES); ValueError naming the valid ones."""
        if name not in self.budgets:
            raise ValueError(f"budget must be one of {list(BUDGET_NAMES)}, got {name!r}")
        return self.budgets[name]

    def options(self) -> dict[str, inspect.Parameter]:
        """The options `run` takes (its keyword parameters other than run_dir, budget and resume), in order."""
        return _options(inspect.unwrap(self.run))

    def option_types(self) -> dict[str, Any]:
        """Each option's annotation, resolved (the command line parses values by it)."""
        hints = typing.get_type_hints(inspect.unwrap(self.run))
        return {name: hints.get(name, Any) for name in self.options()}


def _options(function: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    parameters = inspect.signature(function).parameters
    return {name: p for name, p in parameters.items()
            if name not in ("run_dir", "budget", "resume") and p.kind is inspect.Parameter.KEYWORD_ONLY}


def register_experiment(name: str, *, smoke: Budget, quick: Budget, full: Budget,
                        smoke_args: Mapping[str, Any] | None = None, quick_args: Mapping[str, Any] | None = None,
                        page: str | None = None, extras: tuple[str, ...] = (),
                        volatile: tuple[str, ...] = ()) -> Callable[[Callable[..., Results]], Callable[..., Results]]:
    """Decorator registering `run` as experiment `name` with its three budgets (see the module docstring).

    The options in `smoke_args` and `quick_args` must be options of `run`; the budgets must be `Budget`s; a
    name registered twice by different functions is an error (ValueError naming it).
    """
    for field, budget in (("smoke", smoke), ("quick", quick), ("full", full)):
        if not isinstance(budget, Budget):
            raise ValueError(f"register_experiment({name!r}): {field} must be a Budget, got {budget!r}")

    def decorator(function: Callable[..., Results]) -> Callable[..., Results]:
        options = _options(function)
        arguments = {"smoke": dict(smoke_args or {}), "quick": dict(quick_args or {}), "full": {}}
        for budget_name, values in arguments.items():
            unknown = sorted(set(values) - set(options))
            if unknown:
                raise ValueError(f"register_experiment({name!r}): {budget_name}_args name unknown options "
                                 f"{unknown}; run takes {list(options)}")

        @functools.wraps(function)
        def run(run_dir: Any, **kwargs: Any) -> Results:
            unknown = sorted(set(kwargs) - set(options) - {"budget", "resume"})
            if unknown:
                raise ValueError(f"{name}: unknown option(s) {unknown}; options: {list(options)}")
            check_run_dir(name, run_dir)
            # common.Experiment stamps the run directory it creates with this name (experiment.json).
            with running_experiment(name):
                return function(run_dir, **kwargs)

        module = inspect.getmodule(function)
        doc = (module.__doc__ if module is not None else None) or function.__doc__ or name
        spec = ExperimentSpec(name=name, run=run, budgets={"smoke": smoke, "quick": quick, "full": full},
                              arguments=arguments, summary=doc.strip().splitlines()[0], page=page,
                              extras=tuple(extras), volatile=tuple(volatile))
        existing = _REGISTERED.get(name)
        if existing is not None and inspect.unwrap(existing.run) is not function:
            raise ValueError(f"experiment {name!r} is already registered by {existing.run.__module__}")
        _REGISTERED[name] = spec
        return run

    return decorator


def names() -> list[str]:
    """Every experiment's name, sorted."""
    return sorted(INDEX)


def get(name: str) -> ExperimentSpec:
    """The experiment registered as `name` (its module imported on first use); ValueError listing the names,
    with the closest one when `name` looks like a misspelling."""
    if name not in INDEX:
        raise ValueError(f"unknown experiment {name!r}{did_you_mean(name, INDEX)}; experiments: {', '.join(names())}")
    if name not in _REGISTERED:
        importlib.import_module(INDEX[name])
    if name not in _REGISTERED:
        raise ValueError(f"module {INDEX[name]} registers no experiment {name!r}")
    return _REGISTERED[name]


def specs() -> Iterator[ExperimentSpec]:
    """Every registered experiment's spec, by name (imports every experiment module)."""
    for name in names():
        yield get(name)


def run(name: str, run_dir: Any, *, budget: str | Budget = "quick", resume: bool = False,
        **options: Any) -> Results:
    """Runs experiment `name` into `run_dir`: `budget` is "smoke", "quick", "full" or a `Budget`; a named budget
    brings its options (e.g. QUICK's smaller grid), which `options` override.

    Example (what a notebook runs)::

        from icml26zoo import repro
        results = repro.run("fox_fix", "runs/fox_fix", budget="quick")
    """
    spec = get(name)
    # Before anything is built or written: a notebook or script without the experiment's extra gets the one-line
    # MissingExtraError with the pip command (the command line checks the same before it calls this).
    require_extras("train", *spec.extras, what=f"experiment {name!r}")
    arguments: dict[str, Any] = {}
    if isinstance(budget, str):
        arguments = dict(spec.arguments.get(budget, {}))
        budget = spec.budget(budget)
    arguments.update(options)
    return spec.run(run_dir, budget=budget, resume=resume, **arguments)


def check_run_dir(name: str, run_dir: Any) -> None:
    """ValueError when `run_dir` holds another experiment's run (its experiment.json names another one)."""
    marker = pathlib.Path(run_dir) / MARKER
    if not marker.is_file():
        return
    try:
        owner = json.loads(marker.read_text()).get("experiment")
    except (OSError, ValueError, AttributeError):
        owner = None
    if owner != name:
        raise ValueError(f"run_dir {str(run_dir)!r} holds a run of experiment {owner!r}, not {name!r}; "
                         f"use another --out")

