"""ACDA's interaction layer (icml26zoo.rl.delays), agent (icml26zoo.rl.acda) and the LQ family's exact regret
(icml26zoo.rl.control_envs): ACDA invariants 1-5 with hand-written delays and a dropped packet.
No official code exists for ACDA (a reconstruction), so nothing is compared against one.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26zoo.rl import acda
from icml26zoo.rl import control_envs as ce
from icml26zoo.rl.acda_run import hindsight_transitions, run_episode
from icml26zoo.rl.delays import (
    DelayConfig,
    LogEntry,
    delayed_env,
    init_layer,
    interaction_step,
    reconstruct_actions,
    run_interaction,
    sample_delays,
)

pytestmark = pytest.mark.usefixtures("fast_compile")

T, H = 8, 3
# Packet t holds 10 t + k in row k, so an applied value names its packet and row.
MATRICES = (10.0 * jnp.arange(T, dtype=jnp.float32)[:, None, None]
            + jnp.arange(H, dtype=jnp.float32)[None, :, None]) * jnp.ones((T, H, 1))


def _run(delays, dropped=None, matrices=MATRICES, **kw):
    dropped = np.zeros(len(delays), bool) if dropped is None else np.asarray(dropped)
    applied, log = run_interaction(matrices, np.asarray(delays), dropped, **kw)
    return np.asarray(applied[:, 0]), log


def test_zero_delay_and_horizon_one_is_the_standard_mdp():
    applied, log = _run([0] * T, matrices=MATRICES[:, :1])
    np.testing.assert_array_equal(applied, 10.0 * np.arange(T))
    np.testing.assert_array_equal(log.packet, np.arange(T))
    assert not np.any(log.fallback)


def test_constant_delay_uses_row_s_minus_t_and_a_dropped_packet_falls_back_to_the_previous_one():
    # δ = 1 everywhere, packet 3 dropped: at s = 4 the newest packet is still 2, row 2 (10·2 + 2 = 22).
    applied, log = _run([1] * T, dropped=[0, 0, 0, 1, 0, 0, 0, 0])
    np.testing.assert_array_equal(applied, [0, 1, 11, 21, 22, 41, 51, 61])
    np.testing.assert_array_equal(log.packet, [-1, 0, 1, 2, 2, 4, 5, 6])
    np.testing.assert_array_equal(log.row, [-1, 1, 1, 1, 2, 1, 1, 1])
    # With packets 3 and 4 dropped the newest packet runs out of rows at s = 5: fallback to its last row,
    # or to zero.
    applied, log = _run([1] * T, dropped=[0, 0, 0, 1, 1, 0, 0, 0])
    np.testing.assert_array_equal(applied, [0, 1, 11, 21, 22, 22, 51, 61])
    assert list(np.asarray(log.fallback)) == [True, False, False, False, False, True, False, False]
    applied, _ = _run([1] * T, dropped=[0, 0, 0, 1, 1, 0, 0, 0], fallback="zero")
    np.testing.assert_array_equal(applied, [0, 1, 11, 21, 22, 0, 51, 61])


def test_late_packets_never_override_a_newer_one():
    # Packet 1 takes 3 steps (arrives at 4), packet 2 none (arrives at 2): packet 1 must not replace it.
    applied, log = _run([0, 3, 0, 5, 5, 5, 5, 5])
    np.testing.assert_array_equal(applied[:5], [0, 1, 20, 21, 22])
    np.testing.assert_array_equal(log.packet[:5], [0, 0, 2, 2, 2])
    # Every arrival was reported with its delay (hindsight): packet 1 at s = 4 with delay 3.
    assert int(log.arrived_delays[4, 3]) == 1 and int(log.arrived_delays.sum()) == 3  # packets 0, 2, 1


def test_hindsight_log_reconstructs_the_applied_actions_and_the_wrapper_reports_them():
    config = DelayConfig(horizon=4, max_delay=5, loss_prob=0.3)
    delays, dropped = sample_delays(jax.random.key(0), (40,), config)
    matrices = jax.random.normal(jax.random.key(1), (40, 4, 2))
    applied, log = run_interaction(matrices, delays, dropped, max_delay=5)
    np.testing.assert_array_equal(reconstruct_actions(matrices, log), applied)
    assert bool(jnp.any(log.fallback)) and bool(jnp.any(dropped))

    task = ce.PointMassTask(jnp.array([1.0, 0.0]), jnp.eye(2))
    inner, params = ce.point_mass_env(task, episode_length=12)
    env = delayed_env(inner, DelayConfig(horizon=4, max_delay=5, loss_prob=0.3, obs_delay=2))

    def agent(state, t, obs, log, valid, key):
        return state, jax.random.uniform(key, (4, 2), minval=-1, maxval=1)

    episode = jax.jit(lambda k: run_episode(env, params, k, agent, (), 12))(jax.random.key(2))
    _, actions, _, usable = hindsight_transitions(episode, 2)
    np.testing.assert_array_equal(np.asarray(usable), [0, 0] + [1] * 10)
    np.testing.assert_allclose(actions[2:], episode.applied[:10])  # the log of step t names a_{t−2}


def test_delay_distribution_is_a_truncated_geometric_with_mean_two():
    delays, dropped = sample_delays(jax.random.key(3), (40_000,), DelayConfig())
    # E[min(G, 10)] = Σ_{k=1..10} P(G ≥ k) = 2 (1 − (2/3)^10) for G geometric with mean 2.
    assert abs(float(jnp.mean(delays.astype(jnp.float32))) - 2 * (1 - (2 / 3) ** 10)) < 0.05
    assert int(delays.min()) == 0 and int(delays.max()) == 10
    assert abs(float(jnp.mean(dropped.astype(jnp.float32))) - 0.05) < 0.01


@pytest.mark.parametrize("delta", [0, 2])
def test_perfect_model_action_matrix_reproduces_the_undelayed_optimal_trajectory(delta):
    task = ce.random_lq_task(jax.random.key(4), 3, 2)
    gain = ce.lqr_gain(task)
    delays = DelayConfig(horizon=4, max_delay=3, obs_delay=1)
    config = acda.ACDAConfig(obs_dim=3, action_dim=2, prior_delay=delta)
    policy, dynamics = (lambda x: -gain @ x), (lambda x, u: ce.lq_step(x, u, task)[0])
    steps = 14

    def body(carry, t):
        layer, memory, states, log = carry  # states [steps + 1, 3]: the true trajectory so far
        obs = states[jnp.maximum(t - 1, 0)]
        memory, matrix, _ = acda.act(memory, t, obs, log, t >= 2, policy, dynamics, config=config, delays=delays)
        layer, applied, entry = interaction_step(layer, t, matrix, delta, False)
        states = states.at[t + 1].set(dynamics(states[t], applied))
        return (layer, memory, states, entry), applied

    x0 = jnp.array([1.0, -0.5, 2.0])
    empty = LogEntry(jnp.int32(-1), jnp.int32(-1), jnp.bool_(True), jnp.zeros(4, jnp.int32))
    carry = (init_layer(4, 2, 3), acda.init_agent(config, delays), jnp.zeros((steps + 1, 3)).at[0].set(x0), empty)
    (_, _, states, _), applied = jax.jit(lambda c: jax.lax.scan(body, c, jnp.arange(steps)))(carry)
    np.testing.assert_array_equal(applied[:delta], 0.0)  # nothing has arrived yet
    np.testing.assert_allclose(applied[delta:], -states[delta:steps] @ gain.T, rtol=1e-4, atol=1e-5)
    closed = task.a - task.b @ gain
    expected = [states[delta]]
    for _ in range(steps - delta):
        expected.append(closed @ expected[-1])
    np.testing.assert_allclose(states[delta:], jnp.stack(expected), rtol=1e-4, atol=1e-5)


def test_lqr_regret_is_exact_on_the_linear_quadratic_family():
    task = ce.random_lq_task(jax.random.key(5), 3, 2)
    gain, x0 = ce.lqr_gain(task), jnp.array([0.5, 1.0, -1.0])

    def rollout_cost(k):
        def body(x, _):
            x, cost = ce.lq_step(x, -k @ x, task)
            return x, cost
        return jnp.sum(jax.lax.scan(body, x0, None, length=600)[1])

    perturbed = gain + 0.05 * jax.random.normal(jax.random.key(6), gain.shape)
    costs = jax.jit(jax.vmap(rollout_cost))(jnp.stack([gain, perturbed]))
    exact = jnp.stack([ce.lq_cost(gain, task, x0), ce.lq_cost(perturbed, task, x0)])
    np.testing.assert_allclose(costs, exact, rtol=1e-4)
    assert abs(float(ce.regret(gain, task, x0))) < 1e-4 * float(exact[0])
    np.testing.assert_allclose(ce.regret(perturbed, task, x0), costs[1] - costs[0], rtol=1e-2)
    assert float(ce.regret(perturbed, task, x0)) > 0
    assert np.isinf(float(ce.lq_cost(jnp.zeros_like(gain), task, x0)))  # A is unstable: doing nothing diverges


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="delays"):
        run_interaction(MATRICES, np.array([0, 1, -1, 0, 0, 0, 0, 0]), np.zeros(T, bool))
    with pytest.raises(ValueError, match="horizon"):
        DelayConfig(horizon=0).check()
    with pytest.raises(ValueError, match="horizon"):
        run_interaction(MATRICES[:, :0], np.zeros(T, int), np.zeros(T, bool))
    for loss in (1.0, -0.1):
        with pytest.raises(ValueError, match="loss_prob"):
            sample_delays(jax.random.key(0), (3,), DelayConfig(loss_prob=loss))
    with pytest.raises(ValueError, match="obs_dim"):
        acda.ACDAConfig(obs_dim=0, action_dim=1).check()
    with pytest.raises(ValueError, match="action_dim"):
        acda.init_agent(acda.ACDAConfig(obs_dim=2, action_dim=0), DelayConfig())
    with pytest.raises(ValueError, match="state_dim"):
        ce.random_lq_task(jax.random.key(0), 0, 1)
    with pytest.raises(ValueError, match="action_dim"):
        init_layer(2, 0, 3)


def test_model_fit_learns_the_point_mass_from_logged_transitions():
    task = ce.PointMassTask(jnp.array([1.0, 0.0]), jnp.eye(2))
    obs = jax.random.normal(jax.random.key(7), (64, 4))
    actions = jax.random.uniform(jax.random.key(8), (64, 2), minval=-1, maxval=1)
    nxt = jax.vmap(functools.partial(ce.point_mass_step, task=task))(obs, actions)[0]
    config = acda.ACDAConfig(obs_dim=4, action_dim=2, width=8, ensemble=2)
    model, losses = acda.model_fit(acda.model_init(jax.random.key(9), config), obs, actions, nxt,
                                   jnp.ones(64), jax.random.key(10), steps=60, batch_size=16)
    assert float(losses[-1]) < 0.5 * float(losses[0])  # 0.23 -> 0.062 measured in 60 steps
