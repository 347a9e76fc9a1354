"""The fits of the GCF reproduction (repro/gcf.py): one function per (task, method), each returning its metrics.

OT: μ = N(0, 1) → ν = N(1, 0.5²) with the quadratic cost, whose Monge map x ↦ 1 + x/2 and cost W₂² = 1.25 are known.
  gcf   the layer u(x) = min_j [(x − y_j)² − b_j] with y_j fixed at ν's J quantiles, the semi-discrete dual, map y_{j*}
  mlp   an unconstrained MLP potential (nothing makes it c-concave), the dual with its c-transform over the batch and
        a grid, map x − ½u'(x): the usual neural-dual baseline
Auction: one buyer, two goods with additive values uniform on [0, 1]²; Manelli and Vincent's optimal menu earns ≈ 0.549.
  gcf   a menu of J items (allocations in [0, 1]², prices) plus the outside option, trained on soft revenue
  separate / bundle   the best menus of two simple classes (each good at 1/2; the bundle alone at √(2/3))
Every metric is measured the same way for every method: the map on a fixed sample of μ, revenue in hard mode on the
midpoint grid of [0, 1]².
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.convex import FiniteConvex, FitConfig, fit, gaussian_ot_loss, mean_payment_grid, uniform_auction_loss
from icml26zoo.convex import transport as ot

SOURCE, TARGET = (0.0, 1.0), (1.0, 0.5)
TRANSFORM_GRID = jnp.linspace(-6.0, 6.0, 241)[:, None]  # covers μ and ν well past ±4 standard deviations
OT_METHODS, AUCTION_METHODS = ("gcf", "mlp"), ("gcf", "separate", "bundle")


def eval_source(seed: int, count: int) -> jax.Array:
    """A fixed sample [count, 1] of μ, sorted (so monotonicity is a check of consecutive differences)."""
    x = SOURCE[0] + SOURCE[1] * jax.random.normal(jax.random.key(50_000 + seed), (count, 1))
    return jnp.sort(x, axis=0)


def map_metrics(mapped: jax.Array, potential, x: jax.Array, seed: int) -> dict:
    """RMS error of the map against the closed form, its monotonicity, and the dual on held-out samples against the
    samples' own optimal cost (the dual can only be lower: the transform is a minimum over those samples)."""
    y = TARGET[0] + TARGET[1] * jax.random.normal(jax.random.key(60_000 + seed), x.shape)
    dual = ot.kantorovich_dual(potential, x, y, jnp.concatenate([x, TRANSFORM_GRID]))
    error = jnp.sqrt(jnp.mean(jnp.square(mapped - ot.gaussian_map_1d(x[:, 0], SOURCE, TARGET))))
    return {"map_rmse": float(error), "monotone": bool(jnp.all(jnp.diff(mapped) >= 0.0)), "dual": float(dual),
            "sample_cost": float(ot.empirical_cost_1d(x[:, 0], y[:, 0])),
            "W2_squared": ot.gaussian_cost_1d(SOURCE, TARGET)}


def fit_ot_gcf(num_candidates: int, config: FitConfig, seed: int, eval_points: int) -> dict:
    potential = FiniteConvex(num_candidates, 1, kernel="squared_distance", sense="min", mode="hard",
                             trainable_candidates=False, candidates=ot.gaussian_quantiles_1d(num_candidates, *TARGET),
                             rngs=nnx.Rngs(seed))
    weights = jnp.full((num_candidates,), 1.0 / num_candidates)
    fit(potential, gaussian_ot_loss(SOURCE, config.batch_size, weights), config, seed=seed)
    x = eval_source(seed, eval_points)
    return map_metrics(potential.select(x).choice[:, 0], potential, x, seed)


class PotentialMLP(nnx.Module):
    """u(x [B, 1]) -> [B]: two softplus hidden layers, a linear readout (no convexity constraint)."""

    def __init__(self, width: int, *, rngs: nnx.Rngs) -> None:
        self.hidden = nnx.Linear(1, width, rngs=rngs)
        self.middle = nnx.Linear(width, width, rngs=rngs)
        self.readout = nnx.Linear(width, 1, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.readout(jax.nn.softplus(self.middle(jax.nn.softplus(self.hidden(x)))))[:, 0]


def mlp_dual_loss(batch_size: int):
    """−D(u) with u^c over the batch of μ and TRANSFORM_GRID, on fresh samples of μ and ν."""

    def loss(potential: PotentialMLP, key: jax.Array) -> jax.Array:
        source_key, target_key = jax.random.split(key)
        x = SOURCE[0] + SOURCE[1] * jax.random.normal(source_key, (batch_size, 1))
        y = TARGET[0] + TARGET[1] * jax.random.normal(target_key, (batch_size, 1))
        return -ot.kantorovich_dual(potential, x, y, jnp.concatenate([x, TRANSFORM_GRID]))

    return loss


def fit_ot_mlp(width: int, config: FitConfig, seed: int, eval_points: int) -> dict:
    potential = PotentialMLP(width, rngs=nnx.Rngs(seed))
    fit(potential, mlp_dual_loss(config.batch_size), config, seed=seed)
    x = eval_source(seed, eval_points)
    return map_metrics(ot.gradient_map(potential, x)[:, 0], potential, x, seed)


def fit_auction_gcf(num_candidates: int, config: FitConfig, seed: int, temp: float, grid: int) -> dict:
    menu = FiniteConvex(num_candidates, 2, kernel="inner_product", sense="max", mode="soft", temp=temp,
                        bounds=(0.0, 1.0), default=((0.0, 0.0), 0.0), rngs=nnx.Rngs(seed))
    # Prices start at half of what the item is worth to the type (1, 1): free items would be bought by everyone, and
    # the revenue gradient of an item no one buys is zero (a dead candidate).
    menu.intercepts[...] = 0.5 * jnp.sum(menu.active_candidates(), axis=1)
    fit(menu, uniform_auction_loss(2, config.batch_size), config, seed=seed)
    return {"revenue": float(mean_payment_grid(menu, grid)), "items": num_candidates}


def fixed_menu_revenue(allocations: list[list[float]], prices: list[float], grid: int) -> float:
    """Hard-mode revenue of a given menu (with the outside option) on the midpoint grid, `grid` points per axis."""
    menu = FiniteConvex(len(prices), 2, candidates=jnp.asarray(allocations, jnp.float32), default=((0.0, 0.0), 0.0),
                        rngs=nnx.Rngs(0))
    menu.intercepts[...] = jnp.asarray(prices, jnp.float32)
    return float(mean_payment_grid(menu, grid))


def reference_menus() -> dict[str, tuple[list[list[float]], list[float]]]:
    """Manelli–Vincent's optimum and the two simple classes' best menus for two uniform goods."""
    return {"manelli_vincent": ([[1, 0], [0, 1], [1, 1]], [2 / 3, 2 / 3, (4 - math.sqrt(2)) / 3]),
            "separate": ([[1, 0], [0, 1], [1, 1]], [0.5, 0.5, 1.0]),
            "bundle": ([[1, 1]], [math.sqrt(2 / 3)])}
