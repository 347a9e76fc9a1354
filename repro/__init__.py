"""Reproductions of the papers' central claims, one module per paper, all through the shared trainer.

Each `icml26zoo.repro.<paper>` module has `run(run_dir, budget=..., ...) -> Results` (tables, JSON and PNG
plots written into `run_dir`), a `QUICK` budget its notebook (`notebooks/<paper>.ipynb`) and the test suite
run on a CPU, and a `FULL` budget its script (`scripts/repro/<paper>.py`) runs by default. `common` holds
what they share (`Budget`, `Experiment`, `Results`), `cli` the scripts' shared command line. These modules
need the [train] extra.
"""
