"""Two small continuous-control families for APB and ACDA: a damped 2-D
point mass reaching a goal, and linear-quadratic systems whose optimal (LQR) policy and exact policy costs are
computable, so regret is exact.

Each family is a pure step function (differentiable, usable under `jit`/`grad`/`vmap`) and a gymnax
environment built on it (`point_mass_env`, `lq_env`: subclasses of gymnax's `environment.Environment`, so they
run like gymnax's own environments). gymnax is the optional `[rl]` extra and is imported only when one of
those environments is made; the pure functions need JAX only.

Point mass (task = goal g ∈ R² and action rotation R ∈ SO(2)), state s = [x, v] ∈ R⁴, action a ∈ [−1, 1]²:
    v' = v + dt (R a − c v),  x' = x + dt v',  reward = −‖x' − g‖ − 0.01 ‖a‖².
The observation is s itself: the goal and the rotation are not observed, so a policy must learn them per task
(APB's task-specific input and output layers can: b_in absorbs the goal, W_out the rotation).

Linear-quadratic task (A, B, Q, R): x' = A x + B u (+ w, w ~ N(0, σ² I) in the gymnax version), cost
xᵀQx + uᵀRu. For a linear policy u = −K x with A − BK stable, the noise-free total cost from x0 is x0ᵀ P_K x0
with P_K = Q + KᵀRK + (A − BK)ᵀ P_K (A − BK) (a Lyapunov equation, solved exactly by vectorisation); the
LQR gain K* (discrete Riccati equation) minimises it for every x0, so regret(K) = x0ᵀ (P_K − P_K*) x0 ≥ 0.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from icml26zoo.validation import check_int, check_non_negative, check_positive

__all__ = ["LQTask", "PointMassTask", "lq_cost", "lq_env", "lq_step", "lqr_gain", "make_point_mass_task",
           "point_mass_env", "point_mass_reward", "point_mass_step", "policy_cost_matrix", "random_lq_task",
           "regret", "rotation"]

POS, VEL = slice(0, 2), slice(2, 4)


class PointMassTask(NamedTuple):
    """One point-mass task: goal [2], action rotation [2, 2], damping c and time step dt (scalars)."""

    goal: jax.Array
    rotation: jax.Array
    damping: float = 0.5
    dt: float = 0.1


def rotation(angle: jax.Array) -> jax.Array:
    """The 2-D rotation matrix by `angle` (radians): [2, 2]."""
    c, s = jnp.cos(angle), jnp.sin(angle)
    return jnp.stack([jnp.stack([c, -s]), jnp.stack([s, c])])


def make_point_mass_task(key: jax.Array, radius: float, *, rotate: bool = True) -> PointMassTask:
    """A task with its goal uniform on the circle of `radius` (1 in-distribution, 2 out of it in the spec)
    and, with `rotate`, a uniformly random action rotation."""
    check_positive("radius", radius)
    k_goal, k_rot = jax.random.split(key)
    phi = jax.random.uniform(k_goal, (), minval=0.0, maxval=2 * jnp.pi)
    goal = radius * jnp.stack([jnp.cos(phi), jnp.sin(phi)])
    angle = jax.random.uniform(k_rot, (), minval=0.0, maxval=2 * jnp.pi) if rotate else jnp.float32(0.0)
    return PointMassTask(goal=goal, rotation=rotation(angle))


def point_mass_reward(next_state: jax.Array, action: jax.Array, task: PointMassTask) -> jax.Array:
    """−‖x' − g‖ − 0.01 ‖a‖² for next states [..., 4] and actions [..., 2] -> [...]."""
    dist = jnp.sqrt(jnp.sum((next_state[..., POS] - task.goal) ** 2, axis=-1) + 1e-12)
    return -dist - 0.01 * jnp.sum(action ** 2, axis=-1)


def point_mass_step(state: jax.Array, action: jax.Array, task: PointMassTask) -> tuple[jax.Array, jax.Array]:
    """One step of the damped point mass: state [4], action [2] (clipped to [−1, 1]) -> (next state [4],
    reward [])."""
    a = jnp.clip(action, -1.0, 1.0)
    vel = state[VEL] + task.dt * (task.rotation @ a - task.damping * state[VEL])
    pos = state[POS] + task.dt * vel
    nxt = jnp.concatenate([pos, vel])
    return nxt, point_mass_reward(nxt, a, task)


class LQTask(NamedTuple):
    """x' = a x + b u with cost xᵀ q x + uᵀ r u: a [n, n], b [n, m], q [n, n] (PSD), r [m, m] (PD)."""

    a: jax.Array
    b: jax.Array
    q: jax.Array
    r: jax.Array


def random_lq_task(key: jax.Array, state_dim: int, action_dim: int, *, spectral_radius: float = 1.05) -> LQTask:
    """A random controllable-in-practice LQ task: A with spectral radius `spectral_radius` (slightly unstable
    by default, so doing nothing is costly), Gaussian B, Q = I, R = 0.1 I."""
    check_int("state_dim (observation dim)", state_dim)
    check_int("action_dim", action_dim)
    check_positive("spectral_radius", spectral_radius)
    k_a, k_b = jax.random.split(key)
    a = jax.random.normal(k_a, (state_dim, state_dim))
    a = a * spectral_radius / jnp.max(jnp.abs(jnp.linalg.eigvals(a)))
    b = jax.random.normal(k_b, (state_dim, action_dim)) / jnp.sqrt(state_dim)
    return LQTask(a=a, b=b, q=jnp.eye(state_dim), r=0.1 * jnp.eye(action_dim))


def lq_step(x: jax.Array, u: jax.Array, task: LQTask) -> tuple[jax.Array, jax.Array]:
    """x [n], u [m] -> (A x + B u [n], stage cost xᵀQx + uᵀRu [])."""
    return task.a @ x + task.b @ u, x @ task.q @ x + u @ task.r @ u


def lqr_gain(task: LQTask, *, iterations: int = 2000) -> jax.Array:
    """The infinite-horizon LQR gain K* [m, n] (u = −K* x) by fixed-point iteration of the discrete Riccati
    equation P = Q + AᵀPA − AᵀPB (R + BᵀPB)⁻¹ BᵀPA, from P = Q (converges for stabilisable (A, B))."""
    check_int("iterations", iterations)

    def gain(p: jax.Array) -> jax.Array:
        return jnp.linalg.solve(task.r + task.b.T @ p @ task.b, task.b.T @ p @ task.a)

    def riccati(p: jax.Array, _: None) -> tuple[jax.Array, None]:
        p = task.q + task.a.T @ p @ (task.a - task.b @ gain(p))
        return 0.5 * (p + p.T), None

    p, _ = jax.lax.scan(riccati, task.q, None, length=iterations)
    return gain(p)


def policy_cost_matrix(gain: jax.Array, task: LQTask) -> jax.Array:
    """P_K [n, n] with x0ᵀ P_K x0 the total noise-free cost of u = −K x from x0: the exact solution of
    P = Q + KᵀRK + A_clᵀ P A_cl (A_cl = A − BK) through vec(P) = (I − A_clᵀ ⊗ A_clᵀ)⁻¹ vec(Q + KᵀRK). Entries
    are +inf when A_cl is not stable (the cost diverges)."""
    n = task.a.shape[0]
    closed = task.a - task.b @ gain
    stage = task.q + gain.T @ task.r @ gain
    system = jnp.eye(n * n) - jnp.kron(closed.T, closed.T)
    p = jnp.linalg.solve(system, stage.reshape(-1)).reshape(n, n)
    stable = jnp.max(jnp.abs(jnp.linalg.eigvals(closed))) < 1.0
    return jnp.where(stable, 0.5 * (p + p.T), jnp.inf)


def lq_cost(gain: jax.Array, task: LQTask, x0: jax.Array) -> jax.Array:
    """Total noise-free cost Σ_t x_tᵀQx_t + u_tᵀRu_t of u = −K x from x0 [n] (exact, infinite horizon)."""
    p = policy_cost_matrix(gain, task)
    finite = jnp.all(jnp.isfinite(p))
    return jnp.where(finite, x0 @ jnp.where(finite, p, 0.0) @ x0, jnp.inf)  # inf · (mixed signs) would be nan


def regret(gain: jax.Array, task: LQTask, x0: jax.Array) -> jax.Array:
    """Exact regret of u = −K x against the LQR policy from x0: lq_cost(K) − lq_cost(K*) ≥ 0."""
    return lq_cost(gain, task, x0) - lq_cost(lqr_gain(task), task, x0)


# ---------------------------------------------------------------------------------------------- gymnax versions


@struct.dataclass
class PointMassState:
    """gymnax state of the point mass: s = [x, v] [4] and the step counter."""

    s: jax.Array
    time: int


@struct.dataclass
class PointMassParams:
    """gymnax params: the task's goal [2], rotation [2, 2], damping, dt, start spread and episode length."""

    goal: jax.Array
    rotation: jax.Array
    damping: float = 0.5
    dt: float = 0.1
    start_spread: float = 0.5
    max_steps_in_episode: int = 50


@struct.dataclass
class LQState:
    """gymnax state of an LQ system: x [n] and the step counter."""

    x: jax.Array
    time: int


@struct.dataclass
class LQParams:
    """gymnax params of an LQ system: the task, process-noise std, start std and episode length."""

    task: LQTask
    noise_std: float = 0.0
    start_std: float = 1.0
    max_steps_in_episode: int = 100


@functools.cache
def _gymnax_classes() -> tuple[type, type]:
    """The two gymnax environment classes, defined on first use so that gymnax is imported only then."""
    try:
        from gymnax.environments import environment, spaces
    except ImportError as error:
        raise ImportError("the control environments need gymnax: pip install 'icml26zoo[rl]'") from error

    class PointMass(environment.Environment):
        """The damped point mass as a gymnax environment (reward and dynamics: `point_mass_step`)."""

        @property
        def default_params(self) -> PointMassParams:
            return PointMassParams(goal=jnp.array([1.0, 0.0]), rotation=jnp.eye(2))

        def step_env(self, key: jax.Array, state: PointMassState, action: jax.Array,
                     params: PointMassParams) -> tuple[jax.Array, PointMassState, jax.Array, jax.Array, dict]:
            del key
            task = PointMassTask(params.goal, params.rotation, params.damping, params.dt)
            nxt, reward = point_mass_step(state.s, action, task)
            new = PointMassState(s=nxt, time=state.time + 1)
            return nxt, new, reward, jnp.array(False), {}

        def reset_env(self, key: jax.Array, params: PointMassParams) -> tuple[jax.Array, PointMassState]:
            pos = jax.random.uniform(key, (2,), minval=-params.start_spread, maxval=params.start_spread)
            s = jnp.concatenate([pos, jnp.zeros(2)])
            return s, PointMassState(s=s, time=0)

        def observation_space(self, params: PointMassParams) -> Any:
            return spaces.Box(-jnp.inf, jnp.inf, (4,), jnp.float32)

        def action_space(self, params: PointMassParams) -> Any:
            return spaces.Box(-1.0, 1.0, (2,), jnp.float32)

    class LinearQuadratic(environment.Environment):
        """An LQ system as a gymnax environment: reward = −(xᵀQx + uᵀRu), then x' = Ax + Bu + σ w."""

        def step_env(self, key: jax.Array, state: LQState, action: jax.Array,
                     params: LQParams) -> tuple[jax.Array, LQState, jax.Array, jax.Array, dict]:
            nxt, cost = lq_step(state.x, action, params.task)
            nxt = nxt + params.noise_std * jax.random.normal(key, nxt.shape)
            return nxt, LQState(x=nxt, time=state.time + 1), -cost, jnp.array(False), {}

        def reset_env(self, key: jax.Array, params: LQParams) -> tuple[jax.Array, LQState]:
            x = params.start_std * jax.random.normal(key, (params.task.a.shape[0],))
            return x, LQState(x=x, time=0)

        def observation_space(self, params: LQParams) -> Any:
            return spaces.Box(-jnp.inf, jnp.inf, (params.task.a.shape[0],), jnp.float32)

        def action_space(self, params: LQParams) -> Any:
            return spaces.Box(-jnp.inf, jnp.inf, (params.task.b.shape[1],), jnp.float32)

    return PointMass, LinearQuadratic


def point_mass_env(task: PointMassTask, *, episode_length: int = 50, start_spread: float = 0.5) -> tuple[Any, Any]:
    """(gymnax environment, its params) of the point-mass task (needs the `[rl]` extra)."""
    check_int("episode_length", episode_length)
    check_non_negative("start_spread", start_spread)
    env = _gymnax_classes()[0]()
    params = PointMassParams(goal=task.goal, rotation=task.rotation, damping=task.damping, dt=task.dt,
                             start_spread=start_spread, max_steps_in_episode=episode_length)
    return env, params


def lq_env(task: LQTask, *, noise_std: float = 0.0, episode_length: int = 100) -> tuple[Any, Any]:
    """(gymnax environment, its params) of the LQ task (needs the `[rl]` extra)."""
    check_non_negative("noise_std", noise_std)
    check_int("episode_length", episode_length)
    return _gymnax_classes()[1](), LQParams(task=task, noise_std=noise_std, max_steps_in_episode=episode_length)
