"""The three computations of the DP-mechanisms reproduction (repro/dp_mechanisms.py): the scalar l1/l2
comparison of MoG noise with the analytic Gaussian, the SGG sweep in low dimension with composition, and a tiny
DP-SGD run. Each returns plain rows (dicts) for the tables."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from icml26zoo.privacy import accounting, dpsgd, gaussian, mog, sgg

# The MoG weight families searched: π_k ∝ exp(−λ|k|) with λ = ε · decay_factor, means at k · spacing · Δ.
MOG_RADIUS = 3
CALIBRATION_SHIFTS = 16
VERIFY_SHIFTS = 256


def mog_row(eps: float, delta: float, decay_factors: Sequence[float], spacings: Sequence[float]) -> dict:
    """Analytic Gaussian vs the best MoG (of the searched family) in E|Z| and in E Z², at (ε, δ), Δ = 1.

    Every candidate is calibrated (`mog.mog_sigma` on 16 shifts); the two winners are re-checked on 256
    shifts (`delta_check_*`: their δ there, which should not exceed δ). Printed σ values are rounded up to a
    precision at which they still meet δ (`printed_sigma`): the settings' σ on the 16 calibration shifts, and
    `gauss_sigma` (the analytic Gaussian's σ at 4 significant digits, the losses from the unrounded σ)."""
    sigma_g = gaussian.analytic_gaussian_sigma(eps, delta)
    l1_g, l2_g = gaussian.gaussian_expected_l1(sigma_g), gaussian.gaussian_expected_l2(sigma_g)
    # The table prints 4 significant digits: store σ rounded up there, which still meets δ (δ falls with σ).
    shown_g = float(printed_sigma(sigma_g, lambda s: gaussian.analytic_gaussian_delta(eps, s) <= delta, digits=4))
    candidates = []
    for factor in decay_factors:
        weights = mog.geometric_weights(eps * factor, MOG_RADIUS)
        for spacing in spacings:
            sigma = mog.mog_sigma(eps, delta, weights, spacing,
                                  s_grid=mog.default_shift_grid(1.0, CALIBRATION_SHIFTS))
            candidates.append({"factor": factor, "spacing": spacing, "sigma": sigma, "weights": weights,
                               "l1": mog.mog_expected_l1(sigma, weights, spacing),
                               "l2": mog.mog_expected_l2(sigma, weights, spacing)})
    row = {"eps": eps, "delta": delta, "gauss_sigma": shown_g, "gauss_l1": l1_g, "gauss_l2": l2_g}
    for loss in ("l1", "l2"):
        best = min(candidates, key=lambda c: c[loss])
        check = mog.mog_delta(eps, best["sigma"], best["weights"], best["spacing"],
                              s_grid=mog.default_shift_grid(1.0, VERIFY_SHIFTS))
        meets = _mog_meets(eps, delta, best["weights"], best["spacing"])
        row |= {f"mog_{loss}": best[loss], f"{loss}_ratio": best[loss] / (l1_g if loss == "l1" else l2_g),
                f"mog_{loss}_setting": f"lambda={eps * best['factor']:g}, m={best['spacing']:g}, "
                                       f"sigma={printed_sigma(best['sigma'], meets)}",
                f"delta_check_{loss}": check}
    return row


def _mog_meets(eps: float, delta: float, weights: np.ndarray, spacing: float) -> Callable[[float], bool]:
    """σ -> whether the MoG (weights [2R + 1], spacing) with that σ meets (ε, δ) on the calibration shifts."""
    grid = mog.default_shift_grid(1.0, CALIBRATION_SHIFTS)
    return lambda sigma: mog.mog_delta(eps, sigma, weights, spacing, s_grid=grid) <= delta


def ceil_significant(value: float, digits: int) -> float:
    """`value` > 0 rounded up (towards +inf) at `digits` significant decimal digits, e.g. (0.25333, 3) -> 0.254."""
    exponent = math.floor(math.log10(value)) - digits + 1
    scaled = round(value / 10.0**exponent, 9)  # drops float noise below the last kept digit before the ceiling
    return float(f"{math.ceil(scaled)}e{exponent}")


def printed_sigma(sigma: float, meets: Callable[[float], bool], *, digits: int = 3) -> str:
    """The shortest decimal text of σ rounded up at >= `digits` significant digits whose value still meets the
    privacy target (`meets(σ')` True), so that a reader who takes the printed σ gets (ε, δ). δ need not fall
    monotonically with σ for a mixture, hence the check at each precision; the full repr of `sigma` (which
    the calibration made meet the target) if no shorter text does."""
    for precision in range(digits, 16):
        shown = ceil_significant(sigma, precision)
        if meets(shown):
            return f"{shown:.{precision}g}"
    return repr(sigma)


def sgg_member(eps: float, delta: float, dim: int, p: float, a_ratio: float, grid: tuple[int, int]) -> dict:
    """One SGG member (a = a_ratio·T, p) calibrated at (ε, δ), Δ = 1, with its per-coordinate MSE E‖X‖²/T;
    sigma and mse None (and the reason) when no σ ≤ 1e4 meets (ε, δ): for a < T the density is unbounded at 0,
    so the privacy loss is unbounded near the origin and its tail mass shrinks only like σ^{−a}."""
    try:
        sigma = sgg.sgg_sigma(eps, delta, a_ratio * dim, p, dim, grid=grid)
    except ValueError as error:
        return {"dim": dim, "p": p, "a_ratio": a_ratio, "sigma": None, "mse": None, "infeasible": str(error)}
    return {"dim": dim, "p": p, "a_ratio": a_ratio, "sigma": sigma,
            "mse": sgg.sgg_expected_l2(sigma, a_ratio * dim, p) / dim, "infeasible": None}


def sgg_summary(eps: float, delta: float, dim: int, members: list[dict], grid: tuple[int, int],
                compositions: Sequence[int]) -> dict:
    """The Gaussian (a = T, p = 2), the ℓ2 mechanism (a = T, p = 1) and the best member for one dimension, with
    the best one re-checked on the default (finer) quadrature grid, and the ε after k releases (δ fixed) of
    each, all at the noise calibrated for one release."""
    by_shape = {(m["p"], m["a_ratio"]): m for m in members}
    feasible = [m for m in members if m["mse"] is not None]
    gauss, l2mech, best = by_shape[(2.0, 1.0)], by_shape[(1.0, 1.0)], min(feasible, key=lambda m: m["mse"])
    row = {"dim": dim, "infeasible_members": len(members) - len(feasible), "gauss_mse": gauss["mse"],
           "l2mech_mse": l2mech["mse"], "best_mse": best["mse"],
           "best_p": best["p"], "best_a_ratio": best["a_ratio"], "best_vs_gauss": best["mse"] / gauss["mse"],
           "l2mech_vs_gauss": l2mech["mse"] / gauss["mse"],
           "best_delta_fine_grid": sgg.sgg_delta(eps, best["sigma"], best["a_ratio"] * dim, best["p"], dim)}
    for count in compositions:
        for name, member in (("gauss", gauss), ("best", best)):
            pld = accounting.sgg_pld(member["sigma"], member["a_ratio"] * dim, member["p"], dim, grid=grid,
                                     discretization=2e-3)
            row[f"eps_{count}x_{name}"] = accounting.composed_epsilon(pld, count, delta)
    return row


def blobs(key: jax.Array, count: int, *, features: int = 8, classes: int = 4,
          spread: float = 0.7) -> tuple[jax.Array, jax.Array]:
    """A synthetic classification set: fixed random class means (the same task for every key), unit Gaussian
    noise around them. Returns (x [N, features] float32, labels [N] int32)."""
    label_key, noise_key = jax.random.split(key)
    means = spread * jax.random.normal(jax.random.key(1234), (classes, features))
    labels = jax.random.randint(label_key, (count,), 0, classes)
    return means[labels] + jax.random.normal(noise_key, (count, features)), labels


def _loss(params, batch):
    logits = batch["x"] @ params["w"] + params["b"]
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"]))


def train_dpsgd(noise: str | None, noise_params: dict, *, steps: int, batch_size: int, seed: int,
                clip_norm: float, learning_rate: float, train_size: int, features: int = 8,
                classes: int = 4) -> float:
    """Eval accuracy of softmax regression trained by DP-SGD with `noise` (None: no clipping, no noise: plain
    SGD) on the blobs task; batches walk through a fixed shuffle epoch by epoch."""
    x, labels = blobs(jax.random.key(seed), train_size, features=features, classes=classes)
    x_eval, labels_eval = blobs(jax.random.key(10_000 + seed), 2000, features=features, classes=classes)
    params = {"w": jnp.zeros((features, classes)), "b": jnp.zeros(classes)}
    if noise is None:
        tx = optax.sgd(learning_rate)
        grads_of = lambda p, batch: jax.grad(_loss)(p, batch)  # noqa: E731
    else:
        tx = dpsgd.dp_sgd(learning_rate, clip_norm=clip_norm, noise=noise, noise_params=noise_params, seed=seed)
        grads_of = lambda p, batch: dpsgd.per_example_grads(_loss, p, batch)  # noqa: E731

    @jax.jit
    def step(params, state, batch):
        updates, state = tx.update(grads_of(params, batch), state, params)
        return optax.apply_updates(params, updates), state

    state = tx.init(params)
    order = np.random.default_rng(seed).permutation(train_size)
    per_epoch = train_size // batch_size
    for t in range(steps):
        rows = order[(t % per_epoch) * batch_size:(t % per_epoch + 1) * batch_size]
        params, state = step(params, state, {"x": x[rows], "labels": labels[rows]})
    predictions = jnp.argmax(x_eval @ params["w"] + params["b"], axis=1)
    return float(jnp.mean(predictions == labels_eval))


def dpsgd_noise_settings(eps: float, delta: float, participations: int, dim: int,
                         grid: tuple[int, int]) -> dict[str, dict]:
    """Noise parameters meeting (ε, δ) after `participations` releases (each example's batches), Δ = clip:
    the Gaussian from the analytic formula (k Gaussian releases = one at √k Δ), the ℓ2 mechanism in R^dim by
    bisection on its composed PLD."""
    gauss = gaussian.analytic_gaussian_sigma(eps, delta, math.sqrt(participations))

    def composed(sigma: float) -> float:
        pld = accounting.sgg_pld(sigma, dim, 1.0, dim, grid=grid, discretization=2e-3)
        return accounting.composed_epsilon(pld, participations, delta)

    lo, hi = 0.01, 1.0
    while composed(hi) > eps:
        lo, hi = hi, 2 * hi
    while hi - lo > 1e-3 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if composed(mid) <= eps else (mid, hi)
    return {"gaussian": {"scale": gauss}, "sgg": {"scale": hi, "p": 1.0, "a_ratio": 1.0}}
