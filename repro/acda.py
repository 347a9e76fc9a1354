"""ACDA ("Adaptive Reinforcement Learning for Unobservable Random Delays", Wikman, Proutiere & Broman, ICML
2026): the return under random, unobserved action delays with packet loss of a naive agent, of the
action-matrix agent with a learned-model rollout, and of the same policy undelayed.

Per seed (`repro/acda_parts.py`), on the point mass (goal on the unit circle, no rotation) behind the
interaction layer (`icml26zoo.rl.delays`: δ geometric with mean `mean_delay` truncated at `max_delay`,
`loss_prob` packet loss, packets of `horizon` rows, observation delay `obs_delay`):

1. explore with random action matrices (`batch_size` episodes); the hindsight log gives the applied actions;
2. fit the one-step model (ensemble of 3 MLPs, `model_factor` · steps Adam steps) on those transitions;
3. fit a deterministic policy by backpropagating the known reward through `imagine`-step model rollouts;
4. run that policy as
   - `naive`: acts as if undelayed (every row of its packet is π(latest observation));
   - `acda`: the action matrix rolled out through the model from the latest observation, with the delay
     estimate and the effective horizon adapted from the log's realised delays (`icml26zoo.rl.acda.act`);
   - `undelayed`: no delay, no loss, no observation delay (the reference).

Opt-in, model-free (`agents=a2c_repeat,a2c_matrix,a2c_undelayed`): Gaussian MLP policies trained by the zoo's
actor-critic (A2C with GAE, `icml26zoo.rl.actor_critic`) on the delayed gymnax environment itself, for
`a2c_factor` · steps updates of `a2c_envs` environments × 16 steps each:
   - `a2c_repeat`: delay-unaware, one action per step repeated over the packet's rows;
   - `a2c_matrix`: the action-matrix idea, the policy emits all h rows (row k meant for k steps later) and the
     interaction layer applies the row the realised delay selects;
   - `a2c_undelayed`: the repeating policy trained and run without delays (their reference).
Their pct_of_undelayed is relative to `a2c_undelayed`, and `a2c_matrix`'s gap_closed is measured from `a2c_repeat`.

Everything is the zoo's reconstruction (no official code); the paper's agent is a SAC actor-critic, here the
model-based policy is fitted through the model without a critic (CPU budget), and the a2c_* agents use A2C.
Pure scans, not the shared trainer. Each seed is a cell under ``run_dir/cells/seed=<s>/result.json``, reused on a
rerun. The `Budget` fields:
`steps` = policy Adam steps, `batch_size` = exploration episodes, `seq_len` = episode length, `seeds`.

    from icml26zoo import repro
    results = repro.run("acda", "runs/acda", budget="quick")

From a shell (needs the `rl` extra): `python -m icml26zoo.repro acda [--smoke | --quick] --out DIR
[agents=naive,acda,undelayed] [horizon=8] [mean_delay=2] [max_delay=10] [loss_prob=0.05] [obs_delay=1]
[eval_episodes=16] [imagine=20] [model_factor=3] [a2c_factor=2] [a2c_envs=16] [a2c_lr=0.001]`.
"""

from __future__ import annotations

import os

import numpy as np
from matplotlib.figure import Figure

from icml26zoo.repro import acda_parts as parts
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, mean_std_text, seed_summary_text
from icml26zoo.repro.point_mass_a2c import point_mass_a2c
from icml26zoo.repro.registry import register_experiment
from icml26zoo.repro.stored import stored
from icml26zoo.rl.acda import ACDAConfig
from icml26zoo.rl.delays import DelayConfig
from icml26zoo.validation import check_int, check_positive

__all__ = ["AGENTS", "FULL", "QUICK", "SMOKE", "SMOKE_ARGS", "run"]

FULL = Budget(steps=200, batch_size=16, seq_len=50, seeds=(0, 1, 2))
QUICK = Budget(steps=100, batch_size=16, seq_len=50, seeds=(0,))
# Every agent: 2 exploration episodes of 6 steps, 3 model and 2 policy steps, 2 evaluation episodes, h = 4.
SMOKE = Budget(steps=2, batch_size=2, seq_len=6, seeds=(0,))
SMOKE_ARGS = {"horizon": 4, "max_delay": 3, "eval_episodes": 2, "imagine": 2, "model_factor": 2, "width": 8}

AGENTS = parts.AGENTS
ALL_AGENTS = parts.ALL_AGENTS
COLUMNS = ("agent", "return", "pct_of_undelayed", "gap_closed")


def _cell(experiment: Experiment, seed: int, **options: object) -> dict:
    """`parts.run_seed(seed, **options)`, or the seed's stored result when it was run with the same options (the
    options are frozen dataclasses, tuples and numbers: their repr is the key)."""
    return stored(experiment.cell_dir(f"seed={seed}") / "result.json", {"options": repr(sorted(options.items()))},
                  lambda: parts.run_seed(seed, **options))


def _row(agent: str, agents: tuple[str, ...], per_seed: list[dict]) -> dict:
    """A table row: mean ± std of the return, its share of the undelayed reference and the gap closed (ACDA over
    the naive agent; the matrix policy over the repeating one for the actor-critic agents)."""
    a2c = agent in parts.A2C_AGENTS
    reference, baseline = ("a2c_undelayed", "a2c_repeat") if a2c else ("undelayed", "naive")
    improved = "a2c_matrix" if a2c else "acda"
    row = {"agent": agent, "return": mean_std_text([float(np.mean(s[agent])) for s in per_seed]),
           "pct_of_undelayed": "-", "gap_closed": "-"}
    if reference in agents:
        # Returns are negative: R_undelayed / R is the share of the reference kept (100 % = as undelayed).
        row["pct_of_undelayed"] = mean_std_text([100.0 * float(np.mean(s[reference]) / np.mean(s[agent]))
                                                 for s in per_seed])
        if baseline in agents and agent == improved:
            row["gap_closed"] = mean_std_text([
                float((np.mean(s[agent]) - np.mean(s[baseline])) / (np.mean(s[reference]) - np.mean(s[baseline])))
                for s in per_seed])
    return row


def _figure(per_seed: list[dict], agents: tuple[str, ...]) -> Figure:
    """Per-seed mean return of each agent."""
    figure = Figure(figsize=(6, 4), layout="constrained")
    panel = figure.subplots()
    for i, agent in enumerate(agents):
        values = [float(np.mean(s[agent])) for s in per_seed]
        panel.scatter([i] * len(values), values, label=agent)
        panel.bar(i, float(np.mean(values)), alpha=0.3)
    panel.set(xticks=range(len(agents)), xticklabels=list(agents), ylabel="episode return (per seed)",
              title="point mass under random delays and packet loss")
    panel.grid(True, alpha=0.3)
    return figure


@register_experiment("acda", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     page="docs/papers/acda.md", extras=("rl",))
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, agents: tuple[str, ...] = AGENTS, horizon: int = 8,
        mean_delay: float = 2.0, max_delay: int = 10, loss_prob: float = 0.05, obs_delay: int = 1,
        eval_episodes: int = 16, imagine: int = 20, model_factor: int = 3, width: int = 64, a2c_factor: int = 2,
        a2c_envs: int = 16, a2c_lr: float = 1e-3, resume: bool = False) -> Results:
    """Runs every seed (cells reused on a rerun); writes results.md/json and the figure `acda_returns`.

    Args:
      agents: a subset of ALL_AGENTS ("naive", "acda", "undelayed", "a2c_repeat", "a2c_matrix", "a2c_undelayed");
        the percentages need "undelayed" (a2c_*: "a2c_undelayed") and gap_closed "naive" (a2c_matrix: "a2c_repeat").
      horizon: rows h of each action matrix; mean_delay / max_delay / loss_prob / obs_delay: the delay process.
      eval_episodes: evaluation episodes per agent; imagine: model-rollout length of the policy fit;
      model_factor: the model takes model_factor · budget.steps Adam steps; width: hidden width of the model
        and the policy MLPs (the actor-critic's policies included).
      a2c_factor: the actor-critic makes a2c_factor · budget.steps updates; a2c_envs: its parallel environments;
        a2c_lr: its policy Adam step size (the critic's is 1e-3).
    """
    agents = check_names("agents", agents, ALL_AGENTS)
    delays = DelayConfig(horizon=horizon, mean_delay=mean_delay, max_delay=max_delay, loss_prob=loss_prob,
                         obs_delay=obs_delay).check()
    for name, value in (("eval_episodes", eval_episodes), ("imagine", imagine), ("model_factor", model_factor),
                        ("a2c_factor", a2c_factor), ("a2c_envs", a2c_envs)):
        check_int(name, value)
    check_positive("a2c_lr", a2c_lr, finite=True)
    config = ACDAConfig(obs_dim=4, action_dim=2, width=width).check()
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    options = {"delays": delays, "config": config, "length": budget.seq_len, "explore_episodes": budget.batch_size,
               "model_steps": model_factor * budget.steps, "policy_steps": budget.steps, "imagine": imagine,
               "eval_episodes": eval_episodes, "agents": agents}
    a2c = None
    if set(agents) & set(parts.A2C_AGENTS):  # only then, so the cells of the other agents keep their keys
        a2c = point_mass_a2c(a2c_envs, a2c_factor * budget.steps)
        options.update(a2c=a2c, a2c_lr=a2c_lr)
    per_seed = [_cell(experiment, seed, **options) for seed in budget.seeds]
    rows = [_row(agent, agents, per_seed) for agent in agents]
    realised = [s["realised_delay"] for s in per_seed if "realised_delay" in s]
    notes = [
        f"Point mass (damping 0.5, dt 0.1, {budget.seq_len}-step episodes, goal on the unit circle). Delays: "
        f"geometric, mean {mean_delay:g}, truncated at {max_delay}; packet loss {loss_prob:g}; packets of "
        f"h = {horizon} rows; observation delay {obs_delay}; fallback: the newest packet's last row. Exploration: "
        f"{budget.batch_size} random-matrix episodes; model: 3-MLP ensemble, {model_factor * budget.steps} Adam "
        f"steps on the hindsight-log transitions; policy: {budget.steps} Adam steps through {imagine}-step model "
        f"rollouts. return: mean over {eval_episodes} evaluation episodes; pct_of_undelayed = 100 R_undelayed / R "
        f"(returns are negative); gap_closed = (R_acda − R_naive) / (R_undelayed − R_naive). Mean ± std over "
        f"seeds {budget.seeds}."
        + (f" Realised mean delay (received packets): {np.mean(realised):.2f}." if realised else ""),
    ]
    if a2c is not None:
        notes.append(
            f"a2c_* rows: Gaussian MLP policies (two tanh layers of {width}, state-independent log σ, tanh-squashed) "
            f"trained by the zoo's actor-critic (A2C, GAE λ {a2c.gae_lambda:g}, γ {a2c.gamma:g}, rewards × "
            f"{a2c.reward_scale:g}, normalised advantages, no entropy bonus, clipped Adam {a2c_lr:g}, a width-64 "
            f"critic) on the delayed environment: {a2c.updates} updates of {a2c.num_envs} environments × "
            f"{a2c.rollout} steps ({a2c.updates * a2c.num_envs * a2c.rollout} environment steps) per agent, the "
            f"same budget for each; evaluated by their deterministic action over {eval_episodes} episodes. "
            f"pct_of_undelayed is relative to a2c_undelayed; a2c_matrix's gap_closed = (R_matrix − R_repeat) / "
            f"(R_a2c_undelayed − R_repeat). Per-seed returns (mean; spread = max − min; seeds in order): "
            + "; ".join(seed_summary_text(agent, [float(np.mean(s[agent])) for s in per_seed])
                        for agent in agents if agent in parts.A2C_AGENTS) + ".")
    return experiment.write(rows, columns=COLUMNS, title="ACDA: action matrices under unobservable random delays",
                            notes=notes, figures={"acda_returns": _figure(per_seed, agents)},
                            extra={"per_seed": per_seed})
