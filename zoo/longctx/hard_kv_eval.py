"""HARD-KV against the full cache on a trained LM: next-token agreement, logit error, rows kept, memory.

    python -m icml26zoo.longctx.hard_kv_eval --workdir runs/llama_tiny --budgets 0.25 0.5 1.0

Each budget below 1 is also run as the static-budget baseline at the same memory (sink + the newest rows,
StreamingLLM-style: the forced recent window fills the cap). Teacher forcing: each sequence's first `prompt`
tokens are prefilled (chunked, compressing as the rows fill), then the remaining tokens are fed one per step
through `HardKVLM.decode` under one `lax.scan`; each step's greedy next token is compared with the full
model's on the same prefix. The text is bytes of Python stdlib
modules (the trainer's `pystdlib` corpus is built from the same source).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import pathlib
import sysconfig
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26zoo.longctx.hard_kv import HardKVConfig, cache_rows
from icml26zoo.longctx.hard_kv_calibrate import calibrate_head_scores
from icml26zoo.longctx.hard_kv_model import HardKVLM, memory_per_token

STDLIB_FILES = ("functools.py", "argparse.py", "dataclasses.py", "inspect.py", "typing.py", "pathlib.py")


def stdlib_bytes(count: int, length: int, offset: int = 0) -> np.ndarray:
    """count byte sequences [count, length] int32, each from the middle of one stdlib module (after `offset`)."""
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    rows = []
    for name in STDLIB_FILES[:count]:
        data = (root / name).read_bytes()
        start = len(data) // 3 + offset
        rows.append(np.frombuffer(data[start:start + length], np.uint8).astype(np.int32))
    return np.stack(rows)


@functools.partial(jax.jit, static_argnames=("graphdef",))
def _teacher_forced(graphdef: Any, state: Any, prompt: jax.Array, rest: jax.Array, cache: Any) -> tuple:
    """Prefill prompt [B, P], then feed rest [B, N] one token per step: (logits [B, N, V], final cache)."""
    lm = nnx.merge(graphdef, state)
    logits, cache = lm.decode(prompt, cache)

    def step(cache: Any, token: jax.Array) -> tuple[Any, jax.Array]:
        logits, cache = nnx.merge(graphdef, state).decode(token[:, None], cache)
        return cache, logits[:, 0]

    cache, steps = jax.lax.scan(step, cache, rest[:, :-1].T)
    return jnp.concatenate([logits[:, -1:], jnp.swapaxes(steps, 0, 1)], axis=1), cache


def compare_with_full(model: nnx.Module, lm: HardKVLM, tokens: jax.Array, prompt: int) -> dict[str, Any]:
    """Agreement of HARD-KV decoding with the full model on tokens [B, T] after the first `prompt` tokens.

    Returns the greedy next-token agreement, the max and mean |logit difference|, and the rows each
    (layer, KV head) holds at the end, averaged over the batch, [L, Hkv].
    """
    full = model(tokens)[:, prompt - 1:-1]
    graphdef, state = nnx.split(lm)
    cache = lm.init_cache(tokens.shape[0], tokens.shape[1])
    logits, cache = _teacher_forced(graphdef, state, tokens[:, :prompt], tokens[:, prompt:], cache)
    error = jnp.abs(logits - full)
    return {
        "agreement": float((logits.argmax(-1) == full.argmax(-1)).mean()),
        "max_logit_error": float(error.max()),
        "mean_logit_error": float(error.mean()),
        "rows_per_head": np.stack([np.asarray(c["valid"].sum(-1).mean(0)) for c in cache.layers]).tolist(),
    }


def evaluate(model: nnx.Module, budgets: tuple[float, ...], *, top_p: float, length: int, prompt: int,
             sequences: int, window: int = 16, recent: int = 8, interval: int = 16) -> dict[str, Any]:
    """Calibrates on `sequences` stdlib sequences, then compares each budget with the full cache on others."""
    calibration = jnp.asarray(stdlib_bytes(sequences, length))
    scores = calibrate_head_scores(model, calibration, top_p=top_p)
    tokens = jnp.asarray(stdlib_bytes(sequences, length, offset=4 * length))
    rows = []
    for budget in budgets:
        config = HardKVConfig(budget=budget, top_p=top_p, window=window, recent=recent, interval=interval)
        methods = [("hard_kv", config)]
        if budget < 1:
            # The static-budget baseline at the same memory: forced rows fill the cap (sink + the newest rows).
            streaming = dataclasses.replace(config, recent=cache_rows(config, length) - interval - config.sink)
            methods.append(("sink+recent", streaming))
        for method, method_config in methods:
            lm = HardKVLM(model, scores, method_config)
            rows.append({"method": method, "budget": budget, **memory_per_token(model, lm, sequences, length),
                         **compare_with_full(model, lm, tokens, prompt)})
    return {"temperature": scores.temperature.tolist(), "oracle_fraction": scores.oracle_fraction.tolist(),
            "rows": rows}


def plot(result: dict[str, Any], path: str | pathlib.Path) -> None:
    """Two panels: cache bytes per token and next-token agreement against the budget; rows kept per head."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for row in result["rows"] if row.get("method", "hard_kv") == "hard_kv"]
    baseline = [row for row in result["rows"] if row.get("method") == "sink+recent"]
    budgets = [row["budget"] for row in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    left.plot(budgets, [row["ratio"] for row in rows], "o-", label="cache bytes / full cache")
    left.plot(budgets, [row["agreement"] for row in rows], "s-", label="next-token agreement, HARD-KV")
    if baseline:
        left.plot([row["budget"] for row in baseline], [row["agreement"] for row in baseline], "^--",
                  label="next-token agreement, sink + recent")
    left.set_xlabel("budget (rows / max_len)")
    left.set_ylim(0, 1.3)
    left.legend(fontsize=8)
    for row in rows:
        heads = np.asarray(row["rows_per_head"]).ravel()
        right.plot(np.arange(heads.size), heads, "o-", label=f"budget {row['budget']}")
    right.set_xlabel("(layer, KV head)")
    right.set_ylabel("rows held at the end")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", help="a trained attention LM's run directory")
    parser.add_argument("--budgets", type=float, nargs="+", default=[0.25, 0.5, 1.0])
    parser.add_argument("--top-p", type=float, default=0.9)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--sequences", type=int, default=4)
    parser.add_argument("--out", default=None, help="write the result as JSON here")
    parser.add_argument("--plot", default=None, help="write the figure (PNG) here")
    parser.add_argument("--from-json", default=None, help="plot a result written by --out instead of running")
    args = parser.parse_args()
    if args.from_json:
        result = json.loads(pathlib.Path(args.from_json).read_text())
    else:
        from icml26zoo.train.runs import load_run

        _, model, _ = load_run(args.workdir)
        result = evaluate(model, tuple(args.budgets), top_p=args.top_p, length=args.length, prompt=args.prompt,
                          sequences=args.sequences)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        pathlib.Path(args.out).write_text(text)
    if args.plot:
        plot(result, args.plot)


if __name__ == "__main__":
    main()
