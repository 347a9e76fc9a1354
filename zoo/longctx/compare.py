"""Accuracy against cost of the three long-context methods on the needle task (`icml26zoo.longctx.needle`).

Each runner returns rows {"method", "cost", "accuracy", "agree_with_dense", "rel_error"}; cost is the fraction
of dense attention each method pays: PBS, listed key blocks over causal blocks; HARD-KV, cache rows over T
(memory and per-token attention work); ISA, attention FLOPs (the ISA paper's cost model). Used by
scripts/bench_long_context.py and notebooks/long_context.ipynb, on tasks built from the byte corpus by
`needle_task` of repro/needle.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from icml26zoo.kernels.forgetting_attention import xla as dense_xla
from icml26zoo.longctx import hard_kv
from icml26zoo.longctx.isa import isa_attention_and_plan, isa_flop_fraction
from icml26zoo.longctx.isa_plan import isa_sizes
from icml26zoo.longctx.needle import NeedleTask, isa_layout, retrieval_metrics
from icml26zoo.longctx.pbs import pbs_prefill

ISA_SETTINGS = ({"ctx_keep": 1 / 8, "full_frac": 1 / 2}, {"ctx_keep": 1 / 4, "full_frac": 1 / 2},
                {"ctx_keep": 1 / 2, "full_frac": 1 / 2})
HARD_KV_BUDGETS = (0.1, 0.25, 0.5)
HARD_KV_INTERVAL = 64
PBS_TAUS = (0.5, 0.9)


def dense_causal(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """The zoo's dense causal attention (the blocked plain path of the FoX op, no gate): [B, T, H, D]."""
    return dense_xla.forgetting_attention(q, k, v, None)


def pbs_rows(task: NeedleTask, dense: jax.Array, taus: tuple[float, ...] = PBS_TAUS) -> list[dict]:
    """PBS prefill at each τ (block 64, segment 128); cost = listed blocks / causal blocks."""
    rows = []
    for tau in taus:
        run = jax.jit(lambda q, k, v, tau=tau: pbs_prefill(q, k, v, tau=tau, block_size=64, segment_size=128,
                                                           return_plan=True))
        out, plan = run(task.q, task.k, task.v)
        rows.append({"method": f"PBS tau={tau}", "cost": float(plan.density),
                     **retrieval_metrics(out, dense, task)})
    return rows


def hard_kv_questions(q: jax.Array, k: jax.Array, v: jax.Array, config: hard_kv.HardKVConfig) -> jax.Array:
    """The prompt streamed through one HARD-KV layer cache in chunks of `interval` (compressing before a chunk
    that would overflow), as HardKVLM prefills; q, k, v [1, T, H, D] -> the attention output of the last chunk
    at its place in a [1, T, H, D] array (zeros elsewhere). Head temperatures are 1 (no calibration model here)."""
    _, length, heads, dim = q.shape
    chunk = config.interval
    rows = hard_kv.cache_rows(config, length)
    cache = hard_kv.init_layer_cache(1, heads, heads, dim, rows, config.window, jnp.ones(heads), jnp.float32)
    split = lambda x: x[0, : length - chunk].reshape(-1, 1, chunk, heads, dim)  # noqa: E731
    positions = jnp.arange(length, dtype=jnp.int32)

    def step(c, xs):
        q, k, v, pos = xs
        return hard_kv.append(hard_kv.compress_cache(c, config, chunk), q, k, v, pos), None

    cache, _ = jax.lax.scan(step, cache, (split(q), split(k), split(v),
                                          positions[: length - chunk].reshape(-1, 1, chunk)))
    last = slice(length - chunk, length)
    pos = positions[None, last]
    cache = hard_kv.append(hard_kv.compress_cache(cache, config, chunk), q[:, last], k[:, last], v[:, last], pos)
    return jnp.zeros(q.shape, jnp.float32).at[:, last].set(hard_kv.attend(cache, q[:, last], pos))


def hard_kv_rows(task: NeedleTask, dense: jax.Array, budgets: tuple[float, ...] = HARD_KV_BUDGETS) -> list[dict]:
    """HARD-KV at each budget (top-p 0.9, interval 64); cost = cache rows / T."""
    rows = []
    for budget in budgets:
        config = hard_kv.HardKVConfig(budget=budget, interval=HARD_KV_INTERVAL)
        out = jax.jit(lambda q, k, v, config=config: hard_kv_questions(q, k, v, config))(task.q, task.k, task.v)
        cost = hard_kv.cache_rows(config, task.q.shape[1]) / task.q.shape[1]
        rows.append({"method": f"HARD-KV budget={budget}", "cost": cost, **retrieval_metrics(out, dense, task)})
    return rows


def isa_rows(task: NeedleTask, settings: tuple[dict, ...] = ISA_SETTINGS) -> list[dict]:
    """ISA (block 64, exact_frac 1/16) on the task rotated so the questions open the source part (n_src = T/2),
    against dense bidirectional attention on the same rotated arrays."""
    rotated = isa_layout(task)
    # Dense bidirectional attention at the question rows only (all that is scored; T x T would not fit at 16k).
    at_questions = jax.nn.dot_product_attention(rotated.q[:, rotated.questions], rotated.k, rotated.v)
    dense = jnp.zeros(rotated.q.shape, jnp.float32).at[:, rotated.questions].set(at_questions)
    rows = []
    for setting in settings:
        run = jax.jit(lambda q, k, v, s=setting: isa_attention_and_plan(q, k, v, q.shape[1] // 2, **s)[0])
        out = run(rotated.q, rotated.k, rotated.v)
        rows.append({"method": f"ISA ctx_keep={setting['ctx_keep']:.3g} full_frac={setting['full_frac']:.3g}",
                     "cost": isa_cost(rotated.q.shape[1], setting), **retrieval_metrics(out, dense, rotated)})
    return rows


def isa_cost(length: int, setting: dict) -> float:
    """ISA's attention FLOPs over dense (bidirectional) attention at block 64."""
    return isa_flop_fraction(isa_sizes(length, length // 2, 64, setting["ctx_keep"], setting["full_frac"], 1 / 16))


def retrieval_rows(task: NeedleTask) -> list[dict]:
    """Every method, at every default setting, on one needle task; each row carries the task's length T."""
    length = task.q.shape[1]
    dense = jax.jit(dense_causal)(task.q, task.k, task.v)
    rows = [{"method": "dense (causal)", "cost": 1.0, **retrieval_metrics(dense, dense, task)}]
    rows += pbs_rows(task, dense)
    rows += hard_kv_rows(task, dense)
    rows += isa_rows(task)
    return [{"T": length, **r} for r in rows]
