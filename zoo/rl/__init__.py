"""Periodic Q-learning with scheduled target-network updates: constant and adaptive (geometrically growing)
periods, small exact MDPs, a tabular learner and a DQN measured against Q*, and a DQN on gymnax's CartPole
(the `[rl]` extra, imported only when that DQN runs).

Paper: "The Role of Target Update Frequencies in Q-Learning" (Weissmann et al., ICML 2026, arXiv 2602.03911).
"""

from icml26zoo.rl.cartpole_dqn import CartPoleTrace, DQNConfig, episode_returns, greedy_returns, train_cartpole_dqn
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
    "CartPoleTrace", "DQNConfig", "DQNTrace", "FiniteMDP", "GeometricTargetSchedule", "QLearningTrace", "QNetwork",
    "SyncState",
    "adaptive_ratio", "adaptive_schedule", "bellman_optimality", "chain_mdp", "constant_schedule", "episode_returns",
    "greedy_returns",
    "inner_step_size", "make_mdp", "periodic_q_learning", "random_mdp", "sample_transitions", "step",
    "steps_to_reach", "train_cartpole_dqn", "train_dqn",
    "value_iteration",
]
