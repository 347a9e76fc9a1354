"""Training and evaluating the ConfSMoE classifier (`zoo.moe.multimodal`) on the synthetic multimodal task.

The shared trainer consumes token-row batches; continuous multimodal inputs with per-sample missingness
masks do not fit it, so this is a plain optax (Adam) loop over one jitted step, as in `zoo.flows`. Loss:

    L = CE(logits, y) + Σ_layers aux["loss"] (balancing/z losses, if the router has them and weights > 0)
        + confidence_weight · Σ_layers MSE(c, P(o)[y])   (confidence router; routed tokens of samples that
                                                          reach the layer; the sample label on every token)

`PRESETS` holds the paper's three experiment settings (task, model and training configs; see
`zoo.moe.multimodal_data` for what each setting drops). From the command line they run through
`python -m icml26zoo.moe.multimodal_cli --preset setting_II --data-dir DIR`, which reads the task from its
offline TFDS dataset (`train.data.multimodal`, builder "zoo_multimodal").
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from icml26zoo.moe.confidence import confidence_loss
from icml26zoo.moe.diagnostics import routing_diagnostics
from icml26zoo.moe.layer import MoEConfig
from icml26zoo.moe.multimodal import ConfSMoEClassifier, ConfSMoEConfig, TrainingPool, fill_missing, training_pool
from icml26zoo.moe.multimodal_data import MultimodalData, MultimodalSplit, MultimodalTaskConfig
from icml26zoo.moe.registry import router_options
from icml26zoo.optim._hparams import with_standard_promotion
from icml26zoo.validation import check_int, check_positive


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """`steps` Adam steps on minibatches of `batch_size` training samples (drawn without replacement per
    epoch), constant learning rate as in the reference; `impute` toggles stage 2."""

    steps: int = 600
    batch_size: int = 64
    learning_rate: float = 3e-4
    impute: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size"):
            check_int(name, getattr(self, name))
        check_int("seed", self.seed, minimum=0)
        check_positive("learning_rate", self.learning_rate)


def classifier_loss(model: ConfSMoEClassifier, inputs: tuple[jax.Array, ...], present: jax.Array,
                    labels: jax.Array, rng: jax.Array | None, *, impute: bool) -> tuple[jax.Array, dict[str, Any]]:
    """(loss, metrics) of one stage-1-filled batch: inputs[m] [B, S, F_m], present [B, M], labels [B] int."""
    logits, auxes = model(inputs, present, impute=impute, rng=rng)
    ce = jnp.mean(optax.losses.softmax_cross_entropy_with_integer_labels(logits, labels))
    moe_cfg = model.config.moe
    aux_loss = sum(aux["loss"] for aux in auxes)
    confidence_mse = jnp.zeros((), jnp.float32)
    if "confidence" in auxes[0]:
        options = router_options(moe_cfg.router, moe_cfg.router_options)
        token_labels = jnp.repeat(labels, auxes[0]["token_weight"].shape[0] // labels.shape[0])
        confidence_mse = options.confidence_weight * sum(
            confidence_loss(aux["confidence"], aux["class_logits"], token_labels, aux["token_weight"],
                            stop_gradient_target=options.stop_gradient_target) for aux in auxes)
    metrics = {"ce": ce, "confidence_mse": confidence_mse, "logits": logits, "auxes": auxes}
    return ce + aux_loss + confidence_mse, metrics


@dataclasses.dataclass
class TrainedClassifier:
    model: ConfSMoEClassifier
    pool: TrainingPool
    curve: list[tuple[int, float]]
    # (step, layer 0's routing diagnostics on the probe split) at each log step; empty without a probe.
    routing: list[tuple[int, dict[str, Any]]] = dataclasses.field(default_factory=list)


def _probe_diagnostics(model_config: ConfSMoEConfig, config: TrainConfig, pool: TrainingPool,
                       probe: MultimodalSplit) -> Any:
    """`diagnose(model) -> {name: value}`: layer 0's routing diagnostics on the stage-1-filled probe, no noise."""
    present = jnp.asarray(probe.present)
    inputs = fill_missing(tuple(map(jnp.asarray, probe.inputs)), present, pool, jax.random.key(config.seed),
                          model_config.pool_size)

    @nnx.jit
    def diagnose(model):
        _, auxes = model(inputs, present, impute=config.impute)
        return routing_diagnostics(auxes[0])

    def as_floats(model: ConfSMoEClassifier) -> dict[str, Any]:
        values = jax.device_get(diagnose(model))
        return {name: np.asarray(v).tolist() if np.ndim(v) else float(v) for name, v in values.items()}

    return as_floats


def train_classifier(data: MultimodalData, model_config: ConfSMoEConfig, config: TrainConfig,
                     *, log_every: int = 100, probe: MultimodalSplit | None = None) -> TrainedClassifier:
    """Trains a fresh classifier on data.train (stage 1 fills from data.train's pool); returns it with its
    (step, mean loss over the last `log_every` steps) curve and, given a `probe` split (e.g. part of the
    training data), layer 0's routing diagnostics on it at the same steps."""
    init_key, step_key = jax.random.split(jax.random.key(config.seed))
    model = ConfSMoEClassifier(model_config, rngs=nnx.Rngs(params=init_key))
    pool = training_pool(data)
    optimizer = nnx.Optimizer(model, with_standard_promotion(optax.adam(config.learning_rate)), wrt=nnx.Param)

    @nnx.jit
    def step(model, optimizer, inputs, present, labels, key):
        fill, noise = jax.random.split(key)
        filled = fill_missing(inputs, present, pool, fill, model_config.pool_size)
        grad_fn = nnx.value_and_grad(lambda m: classifier_loss(m, filled, present, labels, noise,
                                                               impute=config.impute)[0])
        loss, grads = grad_fn(model)
        optimizer.update(model, grads)
        return loss

    diagnose = None if probe is None else _probe_diagnostics(model_config, config, pool, probe)
    order_rng = np.random.default_rng(config.seed)
    train, batch = data.train, min(config.batch_size, len(data.train))
    curve, losses, order, cursor = [], [], order_rng.permutation(len(train)), 0
    routing = []
    for index in range(config.steps):
        if cursor + batch > len(train):
            order, cursor = order_rng.permutation(len(train)), 0
        part = train.take(order[cursor:cursor + batch])
        cursor += batch
        losses.append(step(model, optimizer, tuple(map(jnp.asarray, part.inputs)), jnp.asarray(part.present),
                           jnp.asarray(part.labels), jax.random.fold_in(step_key, index)))
        if (index + 1) % log_every == 0 or index + 1 == config.steps:
            curve.append((index + 1, float(np.mean(jax.device_get(losses)))))
            losses = []
            if diagnose is not None:
                routing.append((index + 1, diagnose(model)))
    return TrainedClassifier(model, pool, curve, routing)


def evaluate_classifier(trained: TrainedClassifier, split: MultimodalSplit, *, impute: bool = True,
                        seed: int = 0) -> dict[str, Any]:
    """Accuracy, macro F1, (one-vs-rest macro) AUC and layer 0's routing diagnostics on a split (no noise).

    The F1 and AUC come from scikit-learn (the `[sklearn]` extra), imported here so the module imports without it.
    """
    try:
        from sklearn.metrics import f1_score, roc_auc_score
    except ImportError as err:
        raise ImportError('evaluate_classifier needs scikit-learn: pip install "icml26-zoo[sklearn]"') from err
    model = trained.model
    inputs = fill_missing(tuple(map(jnp.asarray, split.inputs)), jnp.asarray(split.present), trained.pool,
                          jax.random.key(seed), model.config.pool_size)
    logits, auxes = nnx.jit(lambda m, x, p: m(x, p, impute=impute))(model, inputs, jnp.asarray(split.present))
    probs = np.asarray(jax.nn.softmax(logits, axis=-1), np.float64)
    predictions = probs.argmax(axis=-1)
    labels = split.labels
    if probs.shape[1] == 2:
        auc = roc_auc_score(labels, probs[:, 1])
    else:
        auc = roc_auc_score(labels, probs, multi_class="ovr", average="macro", labels=np.arange(probs.shape[1]))
    diagnostics = jax.device_get(routing_diagnostics(auxes[0]))
    return {"accuracy": float(np.mean(predictions == labels)),
            "f1": float(f1_score(labels, predictions, average="macro")), "auc": float(auc),
            "load": np.asarray(diagnostics["load"]),
            **{name: float(diagnostics[name]) for name in ("load_entropy", "collapse", "max_load_ratio",
                                                           "coselection", "router_entropy")}}


def _preset(setting: str, feature_dims: tuple[int, ...], **task: Any) -> tuple[MultimodalTaskConfig,
                                                                                ConfSMoEConfig, TrainConfig]:
    modalities = len(feature_dims)
    task_config = MultimodalTaskConfig(feature_dims=feature_dims, signal=(1.0,) * modalities, setting=setting,
                                       modality_missing_rates=task.pop("rates", (0.3,) * modalities), **task)
    moe = MoEConfig(num_experts=8, top_k=2, router="confidence", load_balance_weight=0.0, z_loss_weight=0.0)
    model = ConfSMoEConfig(feature_dims=feature_dims, tokens=task_config.tokens, dim=64,
                           num_classes=task_config.num_classes, moe=moe)
    return task_config, model, TrainConfig(steps=1500, batch_size=64, learning_rate=3e-4)


# The three settings at small scale (S = 8, d = 64, E = 8, k = 2, Adam 3e-4; spec "Typical small-scale
# settings"): I modality-specific availability (3 modalities), II random 50% missingness in training and
# test (3 modalities, as the CMU-MOSI script), III random 50% in training, modality 0 absent at test.
PRESETS: dict[str, tuple[MultimodalTaskConfig, ConfSMoEConfig, TrainConfig]] = {
    "setting_I": _preset("I", (6, 10, 4), rates=(0.2, 0.4, 0.6)),
    "setting_II": _preset("II", (6, 10, 4), missing_ratio=0.5),
    "setting_III": _preset("III", (6, 10, 4), missing_ratio=0.5, dropped_modality=0),
}
