"""Periodic Q-learning with scheduled target-network updates: constant and adaptive (geometrically growing)
periods, small exact MDPs, a tabular learner and a DQN measured against Q*, and a DQN on gymnax's CartPole
(the `[rl]` extra, imported only when that DQN runs).

Paper: "The Role of Target Update Frequencies in Q-Learning" (Weissmann et al., ICML 2026, arXiv 2602.03911).

Also, as reconstructions (no official code): APB, a frozen policy backbone with task-specific linear layers
("Adaptive Policy Backbone via Shared Network", Park & Lee, ICML 2026; `apb`, `apb_train`), and ACDA's
interaction layer for unobservable random action delays with its model-based agent ("Adaptive Reinforcement
Learning for Unobservable Random Delays", Wikman et al., ICML 2026; `delays`, `acda`, `acda_run`), on the
point-mass and linear-quadratic families of `control_envs` (gymnax environments when the `[rl]` extra is there),
and a small on-policy actor-critic for any gymnax-style environment that trains both by RL (`actor_critic`: A2C
with GAE(λ), the policy a function argument, its optax optimizer too, so APB's masked optimizer plugs in).
"""

from icml26zoo.rl import acda, actor_critic, apb
from icml26zoo.rl.acda import ACDAConfig
from icml26zoo.rl.actor_critic import A2CConfig
from icml26zoo.rl.apb import APBConfig
from icml26zoo.rl.cartpole_dqn import CartPoleTrace, DQNConfig, episode_returns, greedy_returns, train_cartpole_dqn
from icml26zoo.rl.control_envs import (
    LQTask,
    PointMassTask,
    lq_cost,
    lq_env,
    lqr_gain,
    point_mass_env,
    point_mass_step,
    random_lq_task,
    regret,
)
from icml26zoo.rl.delays import DelayConfig, delayed_env, reconstruct_actions, run_interaction, sample_delays
from icml26zoo.rl.dqn import DQNTrace, QNetwork, train_dqn
from icml26zoo.rl.envs import (
    FiniteMDP,
    bellman_optimality,
    chain_mdp,
    make_mdp,
    random_mdp,
    sample_transitions,
    step,
    value_iteration,
)
from icml26zoo.rl.schedules import (
    GeometricTargetSchedule,
    SyncState,
    adaptive_ratio,
    adaptive_schedule,
    constant_schedule,
)
from icml26zoo.rl.tabular import QLearningTrace, inner_step_size, periodic_q_learning, steps_to_reach

__all__ = [
    "A2CConfig", "ACDAConfig", "APBConfig", "DelayConfig", "LQTask", "PointMassTask", "acda", "actor_critic",
    "apb", "delayed_env", "lq_cost",
    "lq_env", "lqr_gain", "point_mass_env", "point_mass_step", "random_lq_task", "reconstruct_actions", "regret",
    "run_interaction", "sample_delays",
    "CartPoleTrace", "DQNConfig", "DQNTrace", "FiniteMDP", "GeometricTargetSchedule", "QLearningTrace", "QNetwork",
    "SyncState",
    "adaptive_ratio", "adaptive_schedule", "bellman_optimality", "chain_mdp", "constant_schedule", "episode_returns",
    "greedy_returns",
    "inner_step_size", "make_mdp", "periodic_q_learning", "random_mdp", "sample_transitions", "step",
    "steps_to_reach", "train_cartpole_dqn", "train_dqn",
    "value_iteration",
]
