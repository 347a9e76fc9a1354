"""Target-update schedules, exact Q* and periodic Q-learning (Weissmann et al., arXiv 2602.03911): schedule
formulas, exact Q*, convergence, sync bookkeeping and the constant-vs-adaptive comparison."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26zoo.rl.cartpole_dqn import DQNConfig, episode_returns, train_cartpole_dqn
from icml26zoo.rl.dqn import train_dqn
from icml26zoo.rl.envs import bellman_optimality, chain_mdp, random_mdp, sample_transitions, step, value_iteration
from icml26zoo.rl.schedules import GeometricTargetSchedule, adaptive_ratio, adaptive_schedule, constant_schedule
from icml26zoo.rl.tabular import periodic_q_learning, steps_to_reach

pytestmark = pytest.mark.usefixtures("fast_compile")  # tolerance and range checks only (tests/conftest.py)


def test_geometric_periods_match_formula_grow_by_ratio_and_respect_cap():
    sched = adaptive_schedule(3, gamma=0.9, k_max=50)
    r = 0.9 ** (-2 / 3)
    assert sched.ratio == pytest.approx(r) and r == pytest.approx(1.0728, abs=1e-4)
    n = np.arange(80)
    periods = np.asarray(sched.period(jnp.asarray(n, jnp.int32)))
    assert periods.dtype == np.int32
    np.testing.assert_array_equal(periods, np.minimum(50, np.ceil(3 * r**n)).astype(np.int32))
    assert np.all(np.diff(periods) >= 0) and periods.max() == 50 and periods[-1] == 50
    # With a large K_0 the ceiling is negligible and the ratio of successive periods approaches r.
    big = adaptive_schedule(10_000, gamma=0.9, k_max=10**9)
    p = np.asarray(big.period(jnp.arange(30)), np.float64)
    np.testing.assert_allclose(p[1:] / p[:-1], r, rtol=2e-4)
    # No int32 overflow far past the cap.
    assert int(GeometricTargetSchedule(5, 2.0, 2**31 - 1).period(1000)) == 2**31 - 1


def test_ratio_one_is_the_constant_schedule():
    for sched in (GeometricTargetSchedule(7, 1.0, 10**5), constant_schedule(7)):
        np.testing.assert_array_equal(np.asarray(sched.period(jnp.arange(100))), 7)
        np.testing.assert_array_equal(sched.sync_steps(100), np.arange(7, 101, 7))
    # ⌈4 · 1.0728^n⌉ = 4, 5, 5, 5, 6, ...
    np.testing.assert_array_equal(adaptive_schedule(4, 0.9).sync_steps(20), [4, 9, 14, 19])


def test_maybe_sync_under_scan_syncs_exactly_at_schedule_steps():
    sched = adaptive_schedule(2, gamma=0.5, k_max=40)  # r = 1.587: fast growth, many distinct periods
    T = 400

    def body(carry, t):
        target, state = carry
        online = {"w": jnp.full((3,), t + 1, jnp.int32)}  # the "parameters" after gradient step t + 1
        target, state, synced = sched.maybe_sync(online, target, state)
        return (target, state), (synced, target["w"][0])

    init = ({"w": jnp.zeros((3,), jnp.int32)}, sched.init())
    (_, state), (synced, tw) = jax.jit(lambda: jax.lax.scan(body, init, jnp.arange(T)))()
    expected = sched.sync_steps(T)
    np.testing.assert_array_equal(np.nonzero(np.asarray(synced))[0] + 1, expected)
    assert int(state.outer) == expected.size
    # Between syncs the target holds the online value of the last sync step.
    last_sync = np.maximum.accumulate(np.where(np.asarray(synced), np.arange(1, T + 1), 0))
    np.testing.assert_array_equal(np.asarray(tw), last_sync)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: GeometricTargetSchedule(0), "k0"),
        (lambda: GeometricTargetSchedule(2.5), "k0"),
        (lambda: GeometricTargetSchedule(4, ratio=0.9), "ratio"),
        (lambda: GeometricTargetSchedule(4, ratio=float("nan")), "ratio"),
        (lambda: GeometricTargetSchedule(4, k_max=3), "k_max"),
        (lambda: constant_schedule(0), "period"),
        (lambda: constant_schedule(-3), "period"),
        (lambda: GeometricTargetSchedule(-2), "k0"),
        (lambda: adaptive_schedule(10, gamma=1.2), "gamma"),
        (lambda: train_cartpole_dqn(constant_schedule(5), jax.random.key(0), DQNConfig(gamma=1.0)), "gamma"),
        (lambda: train_cartpole_dqn(constant_schedule(5), jax.random.key(0), DQNConfig(buffer_size=0)), "buffer_size"),
        (lambda: adaptive_ratio(1.0), "gamma"),
        (lambda: adaptive_schedule(10, gamma=0.0), "gamma"),
        (lambda: chain_mdp(1), "num_states"),
        (lambda: random_mdp(branching=0), "branching"),
    ],
)
def test_validation_names_the_argument(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize("mdp", [chain_mdp(8, slip=0.2, gamma=0.9), random_mdp(0)], ids=["chain", "random"])
def test_value_iteration_solves_bellman_optimality(mdp):
    q_star = value_iteration(mdp)
    assert np.max(np.abs(bellman_optimality(mdp, q_star) - q_star)) < 1e-10
    # Independent check: Q* is the value of its own greedy policy, Q^π = R + γ P_π Q^π solved exactly.
    S, A = q_star.shape
    P = np.asarray(mdp.P, np.float64)
    P /= P.sum(-1, keepdims=True)
    pi = q_star.argmax(1)
    M = np.zeros((S * A, S * A))  # (s, a) -> (s', π(s'))
    for s in range(S):
        M[s * A : (s + 1) * A, np.arange(S) * A + pi] = P[s]
    q_pi = np.linalg.solve(np.eye(S * A) - mdp.gamma * M, np.asarray(mdp.R, np.float64).ravel())
    np.testing.assert_allclose(q_pi.reshape(S, A), q_star, atol=1e-9)
    if mdp.num_actions == 2:  # the chain: moving right is optimal everywhere but possibly at the far left
        assert np.all(pi[1:] == 1)


def test_step_samples_the_transition_kernel():
    mdp = random_mdp(1, num_states=6, num_actions=2)
    n = 20_000
    s = jnp.full((n,), 4, jnp.int32)
    a = jnp.full((n,), 1, jnp.int32)
    s_next, r = jax.jit(step)(mdp, jax.random.key(0), s, a)
    freq = np.bincount(np.asarray(s_next), minlength=6) / n
    np.testing.assert_allclose(freq, np.asarray(mdp.P[4, 1]), atol=0.015)  # ~4 std of a Bernoulli mean
    np.testing.assert_allclose(np.asarray(r), float(mdp.R[4, 1]))
    bs, ba, _, _ = sample_transitions(mdp, jax.random.key(1), n)
    assert 0.9 < np.bincount(np.asarray(bs) * 2 + np.asarray(ba)).min() / (n / 12) < 1.1


@pytest.fixture(scope="module")
def tabular_runs():
    """The comparison setting: random MDP, 10 states, 3 actions, γ = 0.9, uniform behaviour policy."""
    mdp = random_mdp(0)
    q_star = value_iteration(mdp)
    kw = dict(q_star=q_star, step_size=1.0, decay_k0=30.0)  # α_k = 1 / (1 + k / (S·A)): inner averaging
    runs = {
        "adaptive": periodic_q_learning(mdp, adaptive_schedule(30, mdp.gamma), jax.random.key(0), 1_000_000, **kw),
        "K=300": periodic_q_learning(mdp, constant_schedule(300), jax.random.key(0), 400_000, **kw),
        "K=3000": periodic_q_learning(mdp, constant_schedule(3000), jax.random.key(0), 400_000, **kw),
    }
    return mdp, q_star, {k: jax.device_get(v) for k, v in runs.items()}


def test_tabular_periodic_q_learning_converges_to_q_star(tabular_runs):
    _, q_star, runs = tabular_runs
    start = np.max(np.abs(q_star))  # Q_0 = 0
    adaptive = runs["adaptive"]
    assert adaptive.target_error[-1] < 1e-2
    assert np.max(np.abs(adaptive.q_target - q_star)) == pytest.approx(adaptive.target_error[-1], rel=1e-4)
    for name in ("K=300", "K=3000"):
        assert runs[name].target_error[-1] < start / 20, name


def test_target_changes_only_at_sync_steps(tabular_runs):
    mdp, _, runs = tabular_runs
    for name, sched in (("adaptive", adaptive_schedule(30, mdp.gamma)), ("K=300", constant_schedule(300))):
        run = runs[name]
        assert not np.any(run.target_changed & ~run.synced), name
        np.testing.assert_array_equal(np.nonzero(run.synced)[0] + 1, sched.sync_steps(run.synced.size))


def test_adaptive_schedule_beats_constant_periods(tabular_runs):
    """The bias-variance trade-off the paper describes, measured (seed 0).

    Short constant periods stall at a variance floor (K=300 never gets below 0.1); long ones pay in bias
    (K=3000 reaches 0.1 after ~1.3e5 samples); the geometric schedule, starting short and growing, reaches
    0.1 after ~1.6e4 samples and keeps improving.
    """
    _, _, runs = tabular_runs
    adaptive, k300, k3000 = (runs[k].target_error for k in ("adaptive", "K=300", "K=3000"))
    t_adaptive = steps_to_reach(adaptive, 0.1)
    assert t_adaptive is not None and steps_to_reach(k300, 0.1) is None
    assert 3 * t_adaptive < steps_to_reach(k3000, 0.1)
    # After the same 4e5 samples the adaptive error is far below the short period's floor; against K=3000 it
    # is only comparable at this sample count (measured 0.028 vs 0.027), so no ordering is asserted there.
    assert adaptive[k300.size - 1] < 0.5 * k300[-1]


def test_dqn_error_decreases_and_target_follows_schedule():
    mdp = random_mdp(0)
    q_star = value_iteration(mdp)
    sched = adaptive_schedule(10, mdp.gamma)
    trace = jax.device_get(train_dqn(mdp, sched, jax.random.key(0), 3000, q_star))
    assert trace.error[-1] < trace.error[0] / 5 and math.isfinite(float(trace.loss[-1]))
    np.testing.assert_array_equal(np.nonzero(trace.synced)[0] + 1, sched.sync_steps(3000))


def test_cartpole_dqn_is_deterministic_per_seed_and_syncs_on_gradient_steps():
    """A few steps of the gymnax CartPole DQN: same key, same trace; another key, another one; the target
    syncs follow the schedule counted in gradient steps (which start at learning_starts)."""
    config = DQNConfig(num_steps=48, batch_size=4, buffer_size=32, learning_starts=8, hidden=8)
    sched = constant_schedule(5)
    a, b, c = (jax.device_get(train_cartpole_dqn(sched, jax.random.key(k), config)) for k in (0, 0, 1))
    np.testing.assert_array_equal(a.reward, b.reward)
    np.testing.assert_array_equal(a.loss, b.loss)
    jax.tree.map(np.testing.assert_array_equal, a.params, b.params)
    assert not np.array_equal(a.loss, c.loss)
    assert np.all(a.loss[: config.learning_starts] == 0) and np.all(a.loss[config.learning_starts:] > 0)
    expected = config.learning_starts + sched.sync_steps(config.num_steps - config.learning_starts)
    np.testing.assert_array_equal(np.nonzero(a.synced)[0] + 1, expected)
    ends, returns = episode_returns(a)
    assert np.all(a.reward == 1.0) and returns.sum() == pytest.approx(ends[-1] + 1 if ends.size else 0)


def test_cartpole_needs_the_rl_extra(monkeypatch):
    import sys

    from icml26zoo.rl import cartpole_dqn

    monkeypatch.setitem(sys.modules, "gymnax", None)
    with pytest.raises(ImportError, match=r"\[rl\]"):
        cartpole_dqn.make_cartpole()
