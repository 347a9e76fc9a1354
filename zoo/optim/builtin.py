"""Optimizers the train configs can name, each a thin registration around optax.

A factory takes `(learning_rate, cfg)`: `learning_rate` is a float or an optax schedule and `cfg` is any
object with the fields of `train.config.OptimConfig` (b1, b2, eps, weight_decay). Weight decay applies only
to weight matrices, named `kernel` or `embedding` as Flax's Linear, Conv and Embed name them; norm scales,
biases, gates and other parameters are not decayed.
"""

from __future__ import annotations

from typing import Any

import jax
import optax

from icml26zoo.optim.hparams import optimizer_options
from icml26zoo.registry import register_optimizer

DECAYED_NAMES = ("kernel", "embedding")


def decay_mask(params: Any) -> Any:
    """True for the weight matrices that weight decay should touch, by parameter name.

    The name, not the rank, decides: with scanned layers a norm scale is stacked to [L, D], and a rank
    rule would decay it.
    """
    return jax.tree_util.tree_map_with_path(lambda path, _: _leaf_name(path) in DECAYED_NAMES, params)


def _leaf_name(path: tuple) -> str:
    for key in reversed(path):
        name = getattr(key, "key", getattr(key, "name", None))
        if isinstance(name, str) and name != "value":
            return name
    return ""


@register_optimizer("adamw")
def adamw(learning_rate: float | optax.Schedule, cfg: Any) -> optax.GradientTransformation:
    """AdamW with decoupled weight decay on matrices only."""
    optimizer_options(cfg, "adamw")
    return optax.adamw(
        learning_rate, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay, mask=decay_mask
    )


@register_optimizer("adam")
def adam(learning_rate: float | optax.Schedule, cfg: Any) -> optax.GradientTransformation:
    """Adam without weight decay."""
    optimizer_options(cfg, "adam")
    return optax.adam(learning_rate, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps)


@register_optimizer("sgd")
def sgd(learning_rate: float | optax.Schedule, cfg: Any) -> optax.GradientTransformation:
    """SGD with heavy-ball momentum `b1` and decoupled weight decay on matrices."""
    optimizer_options(cfg, "sgd")
    return optax.chain(
        optax.add_decayed_weights(cfg.weight_decay, mask=decay_mask),
        optax.sgd(learning_rate, momentum=cfg.b1 or None),
    )


@register_optimizer("lion")
def lion(learning_rate: float | optax.Schedule, cfg: Any) -> optax.GradientTransformation:
    """Lion (sign momentum) with decoupled weight decay on matrices."""
    optimizer_options(cfg, "lion")
    return optax.lion(learning_rate, b1=cfg.b1, b2=cfg.b2, weight_decay=cfg.weight_decay, mask=decay_mask)
