"""The experiments layer: every paper's experiment, the studies and the leaderboard, above the trainer.

Each experiment is a registered `run(run_dir, *, budget, resume=False, **options) -> Results` (see
`icml26zoo.repro.registry`) with three budgets: SMOKE (seconds, what the test suite runs), QUICK (a notebook's
default, minutes on a CPU) and FULL (what a paper page reports). From Python::

    from icml26zoo import repro
    results = repro.run("fox_fix", "runs/fox_fix", budget="quick")   # writes results.md/json and PNGs
    print(results.markdown)

From a shell (also from an installed wheel): `python -m icml26zoo.repro --list`, `python -m icml26zoo.repro
<name> [--quick] --out DIR [--resume]`. `common` holds what experiments share (`Budget`, `Experiment`,
`Results`). This layer needs the [train] extra.
"""

_REGISTRY_NAMES = ("get", "names", "register_experiment", "run", "specs")


def __getattr__(name: str) -> object:
    # Lazy: `python -m icml26zoo.repro` checks the [train] extra before the registry imports the trainer.
    if name in _REGISTRY_NAMES:
        from icml26zoo.repro import registry

        return getattr(registry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
