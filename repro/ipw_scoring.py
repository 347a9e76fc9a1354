"""Reproduction: propensity models fit with the IPW scoring rule vs log-loss, judged by IPW estimates of the ATE.

Paper: "Tailoring Strictly Proper Scoring Rules for Downstream Tasks: An Application to Causal Inference"
(ICML 2026, arXiv 2606.03332). See docs/papers/ipw_scoring.md. The rule (`icml26zoo.losses.ipw_scoring`) is
the zoo's RECONSTRUCTION, w(q) = 1/q³ + 1/(1 − q)³.

The spec's synthetic benchmark: per seed a fresh data set of n units, x ~ N(0, I_d), true propensity
p(x) = sigmoid(strength · βᵀx) with β = (1, …, 1)/√d (strength 2.5: propensities near 0 and 1), treatment
T ~ Bernoulli(p), outcome Y = xᵀγ + τT + ε with γ = (1, …, 1), τ = 1, ε ~ N(0, 1) (confounded: xᵀγ and the
propensity both grow with βᵀx). Each propensity model is fit by full-batch L-BFGS (optax) on the whole sample;
its propensities, clipped to [Q_MIN, 1 − Q_MIN] for every method alike, give the Horvitz–Thompson IPW and
the Hájek (normalised) estimates of τ. Methods (METHODS):

- `log_loss`: logistic-linear model, log-loss (the correctly specified maximum-likelihood fit);
- `ipw_sigmoid`: the same logistic-linear model fit with the IPW rule (non-canonical link, still proper);
- `ipw_canonical`: a linear score through the IPW rule's canonical link q = ψ⁻¹(θᵀx + b) (another family);
- `mlp_log_loss`, `mlp_ipw_sigmoid`: a one-hidden-layer tanh MLP (MLP_WIDTH units) through the sigmoid link;
- references without fitting: `true_propensity` (the oracle p(x)) and `naive` (difference in means).

No model goes through the shared trainer (they are a handful of parameters fit to a whole sample), so there
are no resumable cells; `resume` only requires `run_dir` to exist. The `Budget` fields name the sizes
instead: `steps` = L-BFGS iterations, `batch_size` = n units per data set, `seq_len` = the covariate
dimension d, `seeds` = the data sets (all seeds are fit at once, vmapped).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from matplotlib.figure import Figure

from icml26zoo.losses import ipw_scoring
from icml26zoo.repro.common import Budget, Experiment, Results, check_names
from icml26zoo.repro.registry import register_experiment
from icml26zoo.validation import check_interval, check_positive

__all__ = ["FULL", "METHODS", "QUICK", "REFERENCES", "SMOKE", "SMOKE_ARGS", "ate_estimates", "fit_propensities",
           "make_data", "run"]

QUICK = Budget(steps=30, batch_size=500, seq_len=5, seeds=(0, 1, 2, 3))
FULL = Budget(steps=60, batch_size=2000, seq_len=5, seeds=tuple(range(100)))
# SMOKE: one method per loss and model (sigmoid and canonical IPW rule, the MLP with log-loss), 3 L-BFGS
# iterations on 2 data sets of 40 units in d = 2, one strength.
SMOKE = Budget(steps=3, batch_size=40, seq_len=2, seeds=(0, 1))
SMOKE_ARGS = {"methods": ("ipw_sigmoid", "ipw_canonical", "mlp_log_loss"), "strengths": (2.5,)}
METHODS = ("log_loss", "ipw_sigmoid", "ipw_canonical", "mlp_log_loss", "mlp_ipw_sigmoid")
REFERENCES = ("true_propensity", "naive")
TAU = 1.0
# Propensities (every method's, the oracle's too) are clipped to [Q_MIN, 1 − Q_MIN] for the estimators, and
# the IPW rule's loss clips at the same floor (the spec's 1e-3: ℓ(q, 1) → −∞ as q → 1).
Q_MIN = 1e-3
MLP_WIDTH = 16
STRENGTHS = (1.0, 2.5)


def make_data(key: jax.Array, n: int, d: int, strength: float | jax.Array) -> dict[str, jax.Array]:
    """One data set: x [n, d], true propensity p [n], treatment T [n] in {0, 1}, outcome Y [n] (float32)."""
    kx, kt, ke = jax.random.split(key, 3)
    x = jax.random.normal(kx, (n, d))
    beta = jnp.ones(d) / math.sqrt(d)
    p = jax.nn.sigmoid(strength * (x @ beta))
    t = (jax.random.uniform(kt, (n,)) < p).astype(jnp.float32)
    y = x @ jnp.ones(d) + TAU * t + jax.random.normal(ke, (n,))
    return {"x": x, "p": p, "t": t, "y": y}


def _init(method: str, key: jax.Array, d: int) -> dict[str, jax.Array]:
    if method.startswith("mlp"):
        k1, k2 = jax.random.split(key)
        return {"w1": jax.random.normal(k1, (d, MLP_WIDTH)) / math.sqrt(d), "b1": jnp.zeros(MLP_WIDTH),
                "w2": jax.random.normal(k2, (MLP_WIDTH,)) / math.sqrt(MLP_WIDTH), "b2": jnp.zeros(())}
    return {"w": jnp.zeros(d), "b": jnp.zeros(())}


def _score(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    """The model's real-valued output [n] for x [n, d]: a logit, or the canonical score for ipw_canonical."""
    if "w1" in params:
        return jnp.tanh(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]
    return x @ params["w"] + params["b"]


def propensity(method: str, params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    """The fitted propensity q [n] of `method`'s model, unclipped."""
    score = _score(params, x)
    return ipw_scoring.inverse_link(score, "ipw") if method == "ipw_canonical" else jax.nn.sigmoid(score)


def _loss_fn(method: str, x: jax.Array, t: jax.Array, q_min: float) -> Callable[[dict], jax.Array]:
    """The mean training loss of `method` on (x [n, d], T [n]) as a function of its parameters (the IPW rule
    clips its propensities at q_min)."""
    if method.endswith("log_loss"):
        return lambda params: jnp.mean(optax.losses.sigmoid_binary_cross_entropy(_score(params, x), t))
    if method == "ipw_canonical":
        return lambda params: jnp.mean(ipw_scoring.canonical_scoring_loss(_score(params, x), t, clip=q_min))
    return lambda params: jnp.mean(ipw_scoring.sigmoid_scoring_loss(_score(params, x), t, clip=q_min))


def _lbfgs(loss: Callable[[dict], jax.Array], params: dict, steps: int) -> tuple[dict, jax.Array]:
    """`steps` full-batch L-BFGS iterations (optax, zoom line search); returns the parameters and final loss."""
    solver = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(loss)

    def step(carry, _):
        params, state = carry
        value, grad = value_and_grad(params, state=state)
        updates, state = solver.update(grad, state, params, value=value, grad=grad, value_fn=loss)
        return (optax.apply_updates(params, updates), state), None

    (params, _), _ = jax.lax.scan(step, (params, solver.init(params)), length=steps)
    return params, loss(params)


def fit_propensities(method: str, data: dict[str, jax.Array], key: jax.Array, steps: int,
                     q_min: float = Q_MIN) -> tuple[jax.Array, jax.Array]:
    """Fits `method`'s model on one data set; returns (propensities q [n], final training loss)."""
    params = _init(method, key, data["x"].shape[1])
    params, final = _lbfgs(_loss_fn(method, data["x"], data["t"], q_min), params, steps)
    return propensity(method, params, data["x"]), final


def ate_estimates(q: jax.Array, t: jax.Array, y: jax.Array, p: jax.Array, q_min: float = Q_MIN) -> dict[str,
                                                                                                       jax.Array]:
    """IPW (Horvitz–Thompson) and Hájek ATE estimates from propensities q [n] (clipped to [q_min, 1 − q_min]),
    the weights' effective sample size as a fraction of n, the largest weight, and the squared error of the
    weights against the true propensities p [n], mean over units of p (1/q − 1/p)² + (1 − p)(1/(1−q) − 1/(1−p))².
    """
    q = jnp.clip(q, q_min, 1 - q_min)
    treated, control = t / q, (1 - t) / (1 - q)
    weights = treated + control
    return {
        "ipw": jnp.mean(treated * y - control * y),
        "hajek": jnp.sum(treated * y) / jnp.sum(treated) - jnp.sum(control * y) / jnp.sum(control),
        "ess": jnp.sum(weights) ** 2 / jnp.sum(weights**2) / q.shape[0],
        "max_weight": jnp.max(weights),
        "weight_error": jnp.mean(p * (1 / q - 1 / p) ** 2 + (1 - p) * (1 / (1 - q) - 1 / (1 - p)) ** 2),
    }


def _naive(t: jax.Array, y: jax.Array) -> dict[str, jax.Array]:
    difference = jnp.sum(t * y) / jnp.sum(t) - jnp.sum((1 - t) * y) / jnp.sum(1 - t)
    nan = jnp.full((), jnp.nan)
    return {"ipw": difference, "hajek": difference, "ess": jnp.ones(()), "max_weight": nan, "weight_error": nan}


def _simulate(methods: tuple[str, ...], budget: Budget, strength: float, q_min: float) -> dict[str, dict]:
    """Every method's estimates on every seed's data set: {method: {statistic: [S]}} (+ train_loss [S])."""
    keys = jnp.stack([jax.random.key_data(jax.random.fold_in(jax.random.key(seed), round(strength * 1000)))
                      for seed in budget.seeds])
    return jax.device_get(_simulate_seeds(keys, jnp.float32(strength), methods=methods, n=budget.batch_size,
                                          d=budget.seq_len, steps=budget.steps, q_min=q_min))


@functools.partial(jax.jit, static_argnames=("methods", "n", "d", "steps", "q_min"))
def _simulate_seeds(keys: jax.Array, strength: jax.Array, *, methods: tuple[str, ...], n: int, d: int, steps: int,
                    q_min: float) -> dict[str, dict[str, jax.Array]]:
    """`_simulate` for the raw keys [S, 2] of S seeds, vmapped: one compiled program for every strength."""

    def one_seed(key_data):
        data_key, init_key = jax.random.split(jax.random.wrap_key_data(key_data))
        data = make_data(data_key, n, d, strength)
        out = {"true_propensity": ate_estimates(data["p"], data["t"], data["y"], data["p"], q_min),
               "naive": _naive(data["t"], data["y"])}
        for method in methods:
            q, final = fit_propensities(method, data, init_key, steps, q_min)
            out[method] = {**ate_estimates(q, data["t"], data["y"], data["p"], q_min), "train_loss": final}
        return out

    return jax.vmap(one_seed)(keys)


def _row(strength: float, method: str, stats: dict[str, np.ndarray]) -> dict:
    ipw, hajek = np.asarray(stats["ipw"], np.float64), np.asarray(stats["hajek"], np.float64)
    return {
        "strength": strength, "method": method,
        "ipw_bias": float(np.mean(ipw) - TAU), "ipw_rmse": float(np.sqrt(np.mean((ipw - TAU) ** 2))),
        "hajek_bias": float(np.mean(hajek) - TAU), "hajek_rmse": float(np.sqrt(np.mean((hajek - TAU) ** 2))),
        "ess_fraction": float(np.mean(stats["ess"])),
        "max_weight": None if method == "naive" else float(np.median(stats["max_weight"])),
        "weight_error": None if method == "naive" else float(np.median(stats["weight_error"])),
    }


def ate_figure(estimates: dict[float, dict[str, dict[str, np.ndarray]]], labels: Sequence[str]) -> Figure:
    """Box plots of the IPW and Hájek estimates over seeds, one row of panels per strength, τ dashed."""
    strengths = list(estimates)
    figure = Figure(figsize=(11, 3.4 * len(strengths)), layout="constrained")
    axes = figure.subplots(len(strengths), 2, squeeze=False)
    for row, strength in zip(axes, strengths, strict=True):
        for panel, estimator in zip(row, ("ipw", "hajek"), strict=True):
            values = [np.asarray(estimates[strength][m][estimator], np.float64) for m in labels]
            panel.boxplot(values, showfliers=True, flierprops={"markersize": 2})
            panel.set_xticks(range(1, len(labels) + 1), labels, rotation=25, fontsize=8)
            panel.axhline(TAU, linestyle="--", color="gray", linewidth=1)
            name = "IPW (Horvitz–Thompson)" if estimator == "ipw" else "Hájek (normalised IPW)"
            panel.set(title=f"{name}, strength {strength:g}", ylabel="ATE estimate (τ = 1 dashed)")
            panel.grid(True, axis="y", alpha=0.3)
    return figure


def weight_figure() -> Figure:
    """The weight functions w(q) of the IPW rule, its bias variant and log-loss (log scale)."""
    q = np.linspace(0.005, 0.995, 400)
    figure = Figure(figsize=(6.5, 4.2), layout="constrained")
    axes = figure.add_subplot()
    for name, label in (("ipw", "IPW rule 1/q³ + 1/(1−q)³"), ("ipw_bias", "bias variant 1/q² + 1/(1−q)²"),
                        ("log", "log-loss 1/(q(1−q))")):
        axes.plot(q, np.asarray(ipw_scoring.get_rule(name).weight(q)), label=label)
    axes.set(yscale="log", xlabel="predicted propensity q", ylabel="weight w(q) = curvature of E ℓ at q = p",
             title="How hard each rule penalises (q − p)² around p")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    return figure


@register_experiment("ipw_scoring", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     page="docs/papers/ipw_scoring.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, methods: Sequence[str] = METHODS,
        strengths: Sequence[float] = STRENGTHS, q_min: float = Q_MIN, resume: bool = False) -> Results:
    """Fits every method on every seed's data set, per confounding strength, and writes the comparison.

    Args:
      run_dir: where results.md/json, ate.png and weights.png go.
      budget: steps = L-BFGS iterations, batch_size = units n (>= 20), seq_len = covariates d, seeds = data sets
        (>= 2, for a spread).
      methods: a subset of METHODS; the references (oracle propensity, naive difference) are always reported.
      strengths: confounding strengths (finite, > 0, distinct): logit p(x) = strength · βᵀx.
      q_min: the propensity floor in (0, 0.5) for every estimator and the IPW rule's loss (the spec's 1e-3 to
        1e-2).
      resume: require run_dir to exist (everything is recomputed).
    """
    methods = check_names("methods", methods, METHODS)
    strengths = _check_strengths(strengths)
    check_interval("q_min (the propensity floor)", q_min, 0, 0.5, closed="neither")
    if budget.batch_size < 20:
        raise ValueError(f"budget.batch_size (units per data set) must be >= 20, got {budget.batch_size}")
    if len(budget.seeds) < 2:
        raise ValueError(f"budget.seeds must hold at least 2 data sets (bias and RMSE over seeds), "
                         f"got {budget.seeds}")
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    estimates = {strength: _simulate(methods, budget, strength, float(q_min)) for strength in strengths}
    labels = (*REFERENCES, *methods)
    rows = [_row(s, m, estimates[s][m]) for s in strengths for m in labels]
    notes = [
        f"Each seed draws n = {budget.batch_size} units with d = {budget.seq_len} covariates; logit p(x) = "
        "strength · βᵀx, Y = xᵀγ + τT + ε, τ = 1. Models are fit by full-batch L-BFGS "
        f"({budget.steps} iterations); every propensity is clipped to [{q_min:g}, {1 - q_min:g}] before estimating "
        "(and in the IPW rule's loss). "
        f"Bias and RMSE over {len(budget.seeds)} seeds; ess_fraction = (Σw)²/(nΣw²) averaged, max_weight and "
        "weight_error (the squared error of the IPW weights the rule was derived from) are medians over seeds.",
    ]
    return experiment.write(
        rows, columns=("strength", "method", "ipw_bias", "ipw_rmse", "hajek_bias", "hajek_rmse", "ess_fraction",
                       "max_weight", "weight_error"),
        title="IPW scoring rule vs log-loss for propensities: IPW estimates of the ATE on synthetic data",
        notes=notes, figures={"ate": ate_figure(estimates, labels), "weights": weight_figure()},
        extra={"tau": TAU, "q_min": q_min, "mlp_width": MLP_WIDTH, "strengths": list(strengths),
               "per_seed": {f"{s:g}/{m}": {k: np.asarray(v).tolist() for k, v in estimates[s][m].items()}
                            for s in strengths for m in labels}})


def _check_strengths(strengths: Sequence[float]) -> tuple[float, ...]:
    values = tuple(strengths)
    if not values:
        raise ValueError("strengths must hold at least one confounding strength > 0, got none")
    for value in values:
        check_positive("strengths[i]", value, finite=True)
    if len(set(values)) != len(values):
        raise ValueError(f"strengths must not repeat a value, got {list(values)}")
    return tuple(float(v) for v in values)
