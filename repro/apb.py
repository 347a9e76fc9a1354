"""APB ("Adaptive Policy Backbone via Shared Network", Park & Lee, ICML 2026): a random-frozen and a
meta-trained frozen backbone with task-specific linear layers against a fully-trained MLP, on point-mass tasks
with in- and out-of-distribution goals.

Per seed (`repro/apb_parts.py`): a backbone (tanh MLP, `depth` layers of `width`, d_in = d_out = width) is
initialised (Glorot); a copy is meta-trained with the heads of `meta_tasks` in-distribution tasks (goal on the
unit circle, random action rotation) and frozen. Then `eval_tasks` fresh tasks per split (in_dist: goal radius
1; out_dist: radius 2; each with a random rotation) are learned from the same initial task layers by

- `random`: APB on the random frozen backbone (task layers only, backbone masked out of Adam);
- `meta`: APB on the meta-trained frozen backbone;
- `mlp`: the same network fully trained (backbone included), the reference;
- `a2c_random`, `a2c_meta`, `a2c_mlp` (opt-in): the same three trained by reinforcement learning instead, the
  zoo's actor-critic (A2C with GAE, `icml26zoo.rl.actor_critic`) on the point-mass gymnax environment, with APB's
  "gaussian" head and masked optimizer; `a2c_factor` · steps updates of `a2c_envs` environments × 16 steps.
  Their pct_of_mlp is relative to `a2c_mlp`. Needs the `rl` extra.

Training is the zoo's reconstruction (`icml26zoo.rl.apb_train`): analytic policy gradients through the
differentiable point mass instead of the paper's SAC (a CPU budget); a pure scan, not the shared trainer. The
score is the return over fixed start states, and `pct_of_mlp` = 100 (R − R_zero) / (R_mlp − R_zero) with
R_zero the zero-action return (returns are negative distances, so a raw ratio would mean nothing). Each seed
is a cell stored under ``run_dir/cells/seed=<s>/result.json`` and reused on a rerun. The `Budget` fields:
`steps` = Adam steps per task (meta-training takes `meta_factor` times as many), `batch_size` = start states
per step, `seq_len` = episode length, `seeds`.

    from icml26zoo import repro
    results = repro.run("apb", "runs/apb", budget="quick")

From a shell: `python -m icml26zoo.repro apb [--smoke | --quick] --out DIR [methods=random,meta,mlp]
[width=64] [depth=2] [meta_tasks=6] [eval_tasks=3] [meta_factor=2] [learning_rate=0.003]
[a2c_factor=3] [a2c_envs=16] [a2c_lr=0.001]`.
"""

from __future__ import annotations

import os

import numpy as np
from matplotlib.figure import Figure

from icml26zoo.repro import apb_parts as parts
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, mean_std_text, seed_summary_text
from icml26zoo.repro.point_mass_a2c import point_mass_a2c
from icml26zoo.repro.registry import register_experiment
from icml26zoo.repro.stored import stored
from icml26zoo.rl import apb
from icml26zoo.rl.apb_train import PGConfig
from icml26zoo.validation import check_int, check_positive

__all__ = ["FULL", "METHODS", "QUICK", "SMOKE", "SMOKE_ARGS", "run"]

FULL = Budget(steps=150, batch_size=8, seq_len=40, seeds=(0, 1, 2))
QUICK = Budget(steps=100, batch_size=8, seq_len=40, seeds=(0,))
# Every method and both splits: a width-8 backbone, 2 tasks per set, 3 steps of 2 starts over 5-step episodes.
SMOKE = Budget(steps=3, batch_size=2, seq_len=5, seeds=(0,))
SMOKE_ARGS = {"width": 8, "meta_tasks": 2, "eval_tasks": 2}

METHODS = parts.METHODS
ALL_METHODS = parts.ALL_METHODS
COLUMNS = ("split", "method", "task_params", "return", "pct_of_mlp")


def _pct(returns: list[float], zero: list[float], mlp: list[float]) -> float:
    """Mean over tasks of 100 (R − R_zero) / (R_mlp − R_zero)."""
    r, z, m = (np.asarray(v) for v in (returns, zero, mlp))
    return float(np.mean(100.0 * (r - z) / (m - z)))


def _cell(experiment: Experiment, seed: int, **options: object) -> dict:
    """`parts.run_seed(seed, **options)`, or the seed's stored result when it was run with the same options (the
    options are frozen dataclasses, tuples and numbers: their repr is the key)."""
    return stored(experiment.cell_dir(f"seed={seed}") / "result.json", {"options": repr(sorted(options.items()))},
                  lambda: parts.run_seed(seed, **options))


def _figure(first: dict, methods: tuple[str, ...]) -> Figure:
    """Training curves (mean return over the tasks of the first seed) per split and method."""
    figure = Figure(figsize=(10, 4), layout="constrained")
    for panel, (split, scores) in zip(figure.subplots(1, len(first)), first.items(), strict=True):
        for method in methods:
            panel.plot(scores[method]["curve"], label=method)
        panel.axhline(float(np.mean(scores["zero"])), color="grey", linestyle=":", label="zero action")
        panel.set(title=split, xlabel="Adam step (a2c_*: update)", ylabel="training return (mean over tasks)")
        panel.grid(True, alpha=0.3)
        panel.legend(fontsize=8)
    return figure


@register_experiment("apb", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, page="docs/papers/apb.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, methods: tuple[str, ...] = METHODS,
        width: int = 64, depth: int = 2, meta_tasks: int = 6, eval_tasks: int = 3, meta_factor: int = 2,
        learning_rate: float = 3e-3, a2c_factor: int = 3, a2c_envs: int = 16, a2c_lr: float = 1e-3,
        resume: bool = False) -> Results:
    """Trains every method on every split for each seed (cells reused on a rerun); writes results.md/json and
    the figure `apb_curves`.

    Args:
      methods: a subset of ALL_METHODS ("random", "meta", "mlp", "a2c_random", "a2c_meta", "a2c_mlp"); pct_of_mlp
        needs "mlp" (and "a2c_mlp" for the a2c_* rows).
      width: backbone width (d_in = d_out = width); depth: its tanh layers.
      meta_tasks: in-distribution tasks the meta backbone is trained on; eval_tasks: fresh tasks per split.
      meta_factor: meta-training takes meta_factor · budget.steps Adam steps.
      learning_rate: Adam's step size (meta-training and per-task training).
      a2c_factor: the actor-critic makes a2c_factor · budget.steps updates; a2c_envs: its parallel environments;
        a2c_lr: its policy Adam step size (the critic's is 1e-3).
    """
    methods = check_names("methods", methods, ALL_METHODS)
    for name, value in (("width", width), ("depth", depth), ("meta_tasks", meta_tasks),
                        ("eval_tasks", eval_tasks), ("meta_factor", meta_factor), ("a2c_factor", a2c_factor),
                        ("a2c_envs", a2c_envs)):
        check_int(name, value)
    check_positive("learning_rate", learning_rate, finite=True)
    check_positive("a2c_lr", a2c_lr, finite=True)
    config = apb.APBConfig(obs_dim=4, action_dim=2, d_in=width, width=width, depth=depth).check()
    pg = PGConfig(steps=budget.steps, learning_rate=learning_rate, batch_size=budget.batch_size,
                  episode_length=budget.seq_len).check()
    meta_pg = pg._replace(steps=meta_factor * budget.steps)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    options = {"config": config, "pg": pg, "meta_pg": meta_pg, "meta_tasks": meta_tasks, "eval_tasks": eval_tasks,
               "methods": methods}
    a2c = None
    if set(methods) & set(parts.A2C_METHODS):  # only then, so the cells of the other methods keep their keys
        a2c = point_mass_a2c(a2c_envs, a2c_factor * budget.steps)
        options.update(a2c=a2c, a2c_lr=a2c_lr)
    per_seed = [_cell(experiment, seed, **options) for seed in budget.seeds]
    per_task = apb.task_param_count(config)
    per_task_gaussian = apb.task_param_count(config._replace(head="gaussian"))
    full_count = apb.param_count(apb.init_backbone(parts.jax.random.key(0), config)) + per_task
    rows = []
    for split in parts.SPLITS:
        for method in methods:
            returns = [float(np.mean(s[split][method]["return"])) for s in per_seed]
            ref = "a2c_mlp" if method in parts.A2C_METHODS else "mlp"
            pct = ([_pct(s[split][method]["return"], s[split]["zero"], s[split][ref]["return"])
                    for s in per_seed] if ref in methods else None)
            heads = per_task_gaussian if method in parts.A2C_METHODS else per_task
            rows.append({"split": split, "method": method,
                         "task_params": full_count - per_task + heads if method.endswith("mlp") else heads,
                         "return": mean_std_text(returns), "pct_of_mlp": mean_std_text(pct) if pct else "-"})
        rows.append({"split": split, "method": "zero action", "task_params": 0,
                     "return": mean_std_text([float(np.mean(s[split]["zero"])) for s in per_seed]),
                     "pct_of_mlp": "-"})
    unchanged = all(s[split][m]["backbone_unchanged"] for s in per_seed for split in parts.SPLITS
                    for m in methods if not m.endswith("mlp"))
    notes = [
        f"Point mass (damping 0.5, dt 0.1, {budget.seq_len}-step episodes from uniform starts in [−0.5, 0.5]², "
        f"goal and action rotation unobserved). Backbone: {depth} tanh layers of {width} (d_in = d_out = {width}); "
        f"meta backbone trained on {meta_tasks} in-distribution tasks for {meta_pg.steps} steps; each of "
        f"{eval_tasks} fresh tasks per split trained {pg.steps} Adam steps (lr {learning_rate:g}, {pg.batch_size} "
        f"starts per step) by analytic policy gradients through the simulator (a reconstruction; the paper uses "
        f"SAC). return: mean over tasks of the return from {parts.EVAL_STARTS} fixed starts; pct_of_mlp: mean "
        f"over tasks of 100 (R − R_zero) / (R_mlp − R_zero). Mean ± std over seeds {budget.seeds}. "
        f"task_params: trainable parameters per task (the full MLP trains everything). Frozen backbones "
        f"bit-identical after training: {unchanged}.",
    ]
    if a2c is not None:
        notes.append(
            f"a2c_* rows: the same backbones and tasks, trained by the zoo's actor-critic (A2C, GAE λ "
            f"{a2c.gae_lambda:g}, γ {a2c.gamma:g}, rewards × {a2c.reward_scale:g}, normalised advantages, no entropy "
            f"bonus) on the gymnax point mass: {a2c.updates} updates of {a2c.num_envs} environments × {a2c.rollout} "
            f"steps ({a2c.updates * a2c.num_envs * a2c.rollout} environment steps per task), APB's gaussian head "
            f"(tanh-squashed), clipped Adam {a2c_lr:g} for the policy (APB's masked optimizer), a width-64 critic. "
            f"Scored like the others: the deterministic action tanh(μ) from the same fixed starts; their pct_of_mlp "
            f"is relative to a2c_mlp. Per-seed returns (mean; spread = max − min; seeds in order): "
            + "; ".join(seed_summary_text(f"{split} {method}", [float(np.mean(s[split][method]["return"]))
                                                            for s in per_seed])
                        for split in parts.SPLITS for method in methods if method in parts.A2C_METHODS) + ".")
    return experiment.write(rows, columns=COLUMNS, title="APB: frozen backbones with task-specific linear layers",
                            notes=notes, figures={"apb_curves": _figure(per_seed[0], methods)},
                            extra={"per_seed": per_seed, "backbone_unchanged": unchanged})
