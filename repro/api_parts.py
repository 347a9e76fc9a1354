"""The API reproduction's training loop and evaluation (synthetic MSA with missing modalities).

The loop is here, not in the shared trainer: SCOPE's epoch-end prototype update needs every training sample's
projected sequences of the epoch (a cache outside the gradient step) and rewrites non-trainable state between
epochs, which the shared trainer's step-wise loop has no hook for. Each step is one jitted pure function
(L1 + 0.1 · prototype contrastive + 0.1 · six-way reconstruction, value clipping at 0.6 then Adam, as the
official trainer); at the end of each epoch `api_scope.update_prototypes` turns the cache into prototypes.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from icml26zoo.multimodal import api, api_data, api_scope
from icml26zoo.optim.hparams import with_standard_promotion
from icml26zoo.validation import check_int, check_positive

__all__ = ["TrainSettings", "evaluate", "train_model"]

_KEYS = ("text", "audio", "vision")


@dataclasses.dataclass(frozen=True)
class TrainSettings:
    """epochs, batch_size, lr (Adam), grad_clip (element-wise value clip, as torch's clip_grad_value_)."""

    epochs: int
    batch_size: int
    lr: float = 1e-3
    grad_clip: float = 0.6

    def __post_init__(self) -> None:
        check_int("epochs", self.epochs)
        check_int("batch_size", self.batch_size)
        check_positive("lr", self.lr, finite=True)
        check_positive("grad_clip", self.grad_clip, finite=True)


def _optimizer(settings: TrainSettings) -> optax.GradientTransformation:
    # Traced under standard promotion: optax's Adam bias correction mixes a float and an int32, which strict
    # promotion (the test suite's setting) rejects.
    return with_standard_promotion(optax.chain(optax.clip(settings.grad_clip), optax.adam(settings.lr)))


@functools.lru_cache(maxsize=8)  # one compiled step per (model structure, config, settings), shared by seeds
def _train_step(graphdef, config: api.APIConfig, settings: TrainSettings):
    """A jitted (params, rest, opt_state, batch, key) -> (params, opt_state, parts, projected) step."""
    optimizer = _optimizer(settings)

    @jax.jit
    def step(params, rest, opt_state, batch, key):
        def loss_fn(p):
            model = nnx.merge(graphdef, p, rest)
            out = model(batch["text"], batch["audio"], batch["vision"], batch["available"], batch["labels"],
                        train=True, rngs=nnx.Rngs(dropout=key))
            total, parts = api.api_loss(out, batch["labels"], config)
            return total, (parts, out.projected)

        (_, (parts, projected)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, parts, projected

    return step


@functools.partial(jax.jit, static_argnames="discard_rate")
def _update_bank(prototypes, ready, features, classes, discard_rate):
    return tuple(zip(*(api_scope.update_prototypes(p, r, f, classes, discard_rate=discard_rate)
                       for p, r, f in zip(prototypes, ready, features, strict=True)), strict=True))


def train_model(config: api.APIConfig, data: dict[str, np.ndarray], settings: TrainSettings, *,
                seed: int) -> tuple[api.APIModel, list[dict[str, float]]]:
    """Trains an `APIModel` on `data` (synthetic_msa's dict) with random per-sample missingness
    (`api_data.training_mask`); returns the model and the per-epoch mean loss parts."""
    model = api.APIModel(config, rngs=nnx.Rngs(seed))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    opt_state = _optimizer(settings).init(params)
    step = _train_step(graphdef, config, settings)
    rng = np.random.default_rng(seed)
    key = jax.random.key(seed)
    num = data["labels"].shape[0]
    steps = num // settings.batch_size
    history = []
    for _ in range(settings.epochs):
        order = rng.permutation(num)[: steps * settings.batch_size].reshape(steps, settings.batch_size)
        cache, parts_sum = [[], [], []], {}
        for rows in order:
            batch = {k: jnp.asarray(data[k][rows]) for k in (*_KEYS, "labels")}
            batch["available"] = jnp.asarray(api_data.training_mask(settings.batch_size, rng))
            key, sub = jax.random.split(key)
            params, opt_state, parts, projected = step(params, rest, opt_state, batch, sub)
            for m in range(3):
                cache[m].append(projected[m])
            parts_sum = {k: parts_sum.get(k, 0.0) + v for k, v in parts.items()}
        history.append({k: float(v) / steps for k, v in parts_sum.items()})
        if config.fill != "zero":  # the zero-fill baseline keeps no prototypes
            model = nnx.merge(graphdef, params, rest)
            protos, ready = model.bank()
            classes = api_scope.label_to_class(data["labels"][order.reshape(-1)])
            features = tuple(jnp.concatenate(c) for c in cache)
            api.set_prototypes(model, *_update_bank(protos, ready, features, classes, config.discard_rate))
            _, _, rest = nnx.split(model, nnx.Param, ...)
    return nnx.merge(graphdef, params, rest), history


@nnx.jit
def _forward(model: api.APIModel, text, audio, vision, available) -> api.APIOutput:
    return model(text, audio, vision, available, train=False)


def evaluate(model: api.APIModel, data: dict[str, np.ndarray], available: np.ndarray) -> dict[str, float]:
    """Test scores with availability `available` [N, 3]: mae, acc7 (classes of the prediction clipped to
    [-3, 3]), acc2 (sign, y >= 0 positive), class_acc (the imputation class against the true class, over samples
    missing a modality; NaN for the zero fill, which estimates none) and imp_err (relative imputation error
    Σ|fill - x|² / Σ|x|² over the missing modalities in the model's own projected space; 1 for zero fill)."""
    out = _forward(model, *(jnp.asarray(data[k]) for k in _KEYS), jnp.asarray(available))
    labels = data["labels"]
    pred = np.clip(np.asarray(out.prediction), -3.0, 3.0)
    true_class = np.asarray(api_scope.label_to_class(labels))
    scores = {"mae": float(np.mean(np.abs(pred - labels))),
              "acc7": float(np.mean(np.asarray(api_scope.label_to_class(pred)) == true_class)),
              "acc2": float(np.mean((pred >= 0) == (labels >= 0)))}
    missing = ~available
    incomplete = missing.any(axis=1)
    if model.config.fill == "zero" or not incomplete.any():
        scores["class_acc"] = float("nan")
    else:
        scores["class_acc"] = float(np.mean(np.asarray(out.classes)[incomplete] == true_class[incomplete]))
    error = sum(float(np.sum(np.square(np.asarray(f - x))[missing[:, m]]))
                for m, (f, x) in enumerate(zip(out.filled, out.projected, strict=True)))
    energy = sum(float(np.sum(np.square(np.asarray(x))[missing[:, m]])) for m, x in enumerate(out.projected))
    scores["imp_err"] = error / energy if energy > 0 else float("nan")
    return scores
