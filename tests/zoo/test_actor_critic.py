"""The actor-critic (icml26zoo.rl.actor_critic): GAE against a NumPy recursion with episode ends, the squashed
Gaussian's log-density and entropy against scipy, learning on a contextual bandit with an APB policy whose backbone
stays bit-identical under APB's masked optimizer, and ValueErrors that name the bad argument. Tiny sizes: one
compiled training program serves the learning and the masking checks."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import stats

from icml26zoo.rl import actor_critic as ac
from icml26zoo.rl import apb

pytestmark = pytest.mark.usefixtures("fast_compile")


def test_gae_matches_a_numpy_recursion_with_episode_ends():
    rng = np.random.default_rng(0)
    t, n, gamma, lam = 7, 3, 0.9, 0.8
    rewards, values, next_values = (rng.normal(size=(t, n)).astype(np.float32) for _ in range(3))
    terminated = np.zeros((t, n), bool)
    truncated = np.zeros((t, n), bool)
    terminated[2, 0] = terminated[5, 1] = True  # no bootstrap there
    truncated[3, 2] = True  # bootstraps through V(s'), but no advantage flows back across the reset
    done = terminated | truncated
    expected = np.zeros((t, n))
    following = np.zeros(n)
    for i in reversed(range(t)):
        delta = rewards[i] + gamma * (~terminated[i]) * next_values[i] - values[i]
        following = delta + gamma * lam * (~done[i]) * following
        expected[i] = following
    adv, targets = ac.gae(jnp.asarray(rewards), jnp.asarray(values), jnp.asarray(next_values),
                          jnp.asarray(terminated), jnp.asarray(done), gamma, lam)
    np.testing.assert_allclose(adv, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(targets, expected + values, rtol=1e-5, atol=1e-6)


def test_log_prob_and_entropy_match_scipy():
    rng = np.random.default_rng(1)
    mean, log_std, u = (rng.normal(size=(4, 3)).astype(np.float32) for _ in range(3))
    gaussian = stats.norm.logpdf(u, mean, np.exp(log_std)).sum(-1)
    # a = tanh(u): density of a = density of u / |da/du| = density of u / (1 − tanh² u)
    squashed = gaussian - np.log(1.0 - np.tanh(u.astype(np.float64)) ** 2).sum(-1)
    np.testing.assert_allclose(ac.log_prob(mean, log_std, u, "tanh"), squashed, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ac.log_prob(mean, log_std, u, "clip"), gaussian, rtol=1e-5, atol=1e-5)
    # two action axes (a packet [h, d_a]) sum over both
    np.testing.assert_allclose(ac.log_prob(mean, log_std, u, "clip", action_ndim=2), gaussian.sum(), rtol=1e-5)
    np.testing.assert_allclose(ac.gaussian_entropy(log_std), stats.norm.entropy(0, np.exp(log_std)).sum(-1),
                               rtol=1e-5)
    key = jax.random.key(0)
    u_s, a_s = ac.sample(key, jnp.asarray(mean), jnp.asarray(log_std))
    np.testing.assert_allclose(a_s, np.tanh(np.asarray(u_s)), rtol=1e-6)
    assert float(jnp.max(jnp.abs(ac.sample(key, 3.0 * jnp.ones(5), jnp.zeros(5), "clip")[1]))) <= 1.0


class Bandit:
    """A contextual bandit with gymnax's interface: context o ~ U[−1, 1], reward −(a − o/2)², every step ends."""

    def reset(self, key, params):
        context = jax.random.uniform(key, (1,), minval=-1.0, maxval=1.0)
        return context, context

    def step(self, key, state, action, params):
        reward = -jnp.sum((action - 0.5 * state) ** 2)
        obs, new = self.reset(key, params)
        return obs, new, reward, jnp.bool_(True), jnp.bool_(False), {"final_observation": state}


def test_apb_policy_learns_the_bandit_and_its_frozen_backbone_stays_bit_identical():
    env = Bandit()
    config = apb.APBConfig(obs_dim=1, action_dim=1, d_in=8, width=8, depth=1, head="gaussian")
    params = apb.init(jax.random.key(0), config)

    def policy(p, obs):
        return ac.split_gaussian(apb.apply(p, obs))

    a2c = ac.A2CConfig(num_envs=16, rollout=2, updates=150)
    trained, _, trace = ac.train(jax.random.key(1), env, None, policy, params, ac.value_init(jax.random.key(2), 1,
                                                                                             width=8),
                                 policy_tx=apb.optimizer(optax.adam(1e-2)), config=a2c)
    for before, after in zip(jax.tree.leaves(params["backbone"]), jax.tree.leaves(trained["backbone"]), strict=True):
        assert np.array_equal(before, after)
    assert not np.array_equal(params["task"]["w_out"], trained["task"]["w_out"])
    assert trace.episode_return.shape == trace.entropy.shape == trace.value_loss.shape == (150,)
    assert np.all(np.isfinite(trace.value_loss))
    # The initial policy acts ≈ 0 (mean squared error E[o²/4] = 1/12); the trained one must at least quarter it.
    key = jax.random.key(3)
    start = float(jnp.mean(ac.evaluate(key, env, None, policy, params, episodes=64, length=1)))
    end = float(jnp.mean(ac.evaluate(key, env, None, policy, trained, episodes=64, length=1)))
    assert start < -0.05 and end > start / 4, (start, end)
    # the training returns improve as well, and the policy narrows (entropy falls)
    assert np.mean(trace.episode_return[-20:]) > np.mean(trace.episode_return[:20])
    assert trace.entropy[-1] < trace.entropy[0]


@pytest.mark.parametrize(("field", "value"), [("num_envs", 0), ("rollout", 0), ("updates", 0), ("gamma", 1.5),
                                              ("gae_lambda", -0.1), ("entropy_coef", -1.0), ("reward_scale", 0.0),
                                              ("squash", "sigmoid")])
def test_bad_settings_raise_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        ac.make_train(Bandit(), lambda p, o: (o, o), policy_tx=optax.sgd(0.1),
                      config=ac.A2CConfig()._replace(**{field: value}))


def test_bad_arguments_raise_naming_them():
    with pytest.raises(ValueError, match="action_ndim"):
        ac.make_train(Bandit(), lambda p, o: (o, o), policy_tx=optax.sgd(0.1), action_ndim=0)
    for name, kw in (("episodes", {"episodes": 0}), ("length", {"length": 0}), ("squash", {"squash": "none"})):
        with pytest.raises(ValueError, match=name):
            ac.evaluate(jax.random.key(0), Bandit(), None, lambda p, o: (o, o), None, **kw)
    with pytest.raises(ValueError, match="width"):
        ac.value_init(jax.random.key(0), 3, width=0)
    with pytest.raises(ValueError, match="rows"):
        ac.repeat_rows(0)


def test_apb_heads_train_on_the_gymnax_point_mass_with_truncated_episodes():
    pytest.importorskip("gymnax")
    from icml26zoo.rl.apb_train import a2c_train_tasks
    from icml26zoo.rl.control_envs import PointMassTask

    config = apb.APBConfig(obs_dim=4, action_dim=2, d_in=4, width=4, depth=1, head="gaussian")
    backbone = apb.init_backbone(jax.random.key(0), config)
    heads = jax.vmap(lambda k: apb.init_task(k, config))(jax.random.split(jax.random.key(1), 1))
    tasks = PointMassTask(goal=jnp.array([[1.0, 0.0]]), rotation=jnp.eye(2)[None])
    a2c = ac.A2CConfig(num_envs=2, rollout=3, updates=3)
    # 4-step episodes in 3-step rollouts: updates 2 and 3 see the time limit (truncation and auto-reset)
    params, trace = a2c_train_tasks(heads, backbone, tasks, jax.random.split(jax.random.key(2), 1), config=config,
                                    a2c=a2c, episode_length=4)
    assert trace.episode_return.shape == (1, 3) and np.isnan(trace.episode_return[0, 0])
    assert np.all(np.isfinite(trace.episode_return[0, 1:])) and np.all(trace.episode_return[0, 1:] < 0)
    assert all(np.array_equal(a[0], b) for a, b in zip(jax.tree.leaves(params["backbone"]), jax.tree.leaves(backbone),
                                                       strict=True))
    with pytest.raises(ValueError, match="head"):
        a2c_train_tasks(heads, backbone, tasks, jax.random.split(jax.random.key(2), 1),
                        config=config._replace(head="deterministic"), a2c=a2c, episode_length=4)
