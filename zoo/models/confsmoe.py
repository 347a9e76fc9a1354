"""`confsmoe`: ConfSMoE's multimodal classifier (`icml26zoo.moe.multimodal`) as a registered model of the trainer.

The classifier reads M modalities of S tokens each, with a per-sample mask of the missing ones; the trainer
hands it a feature batch (`train.data.features`, dataset `zoo_multimodal`) in which point m·S + s is
modality m's token s, the weights mark the present modalities and the features flag the missing ones whose
stage-1 fill is drawn during training (`moe.multimodal_data.pack_points`):

    model(points [B, N, F_max], features [B, N, 1], weights [B, N]) -> logits [B, C]
    model.classify(points, features, weights, *, impute=True, rng=None) -> (logits [B, C], aux per layer)
    model.unpack(points, features, weights) -> (inputs[m] [B, S, F_m], present [B, M], to_fill [B, M])

Sizes come from the ModelConfig: d_model is the token width d, num_layers the fusion layers, num_heads the
attention heads, `moe` (required) every layer's MoE feed-forward (experts of hidden width d, as in the
reference; mlp_dim is not used); model_options (`ConfSMoEOptions`) give the modalities' feature widths,
the tokens per modality and the classes. `classify` is what objective "multimodal_moe" trains: its aux holds
each layer's routing outputs for the confidence and balancing losses; `impute=False` skips stage 2 and
`rng` turns on the router's training noise. Inputs are stage-1 filled by the data (`zoo_multimodal`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
from flax import nnx

from icml26zoo.models.config import MODEL_OPTIONS_FIELD, ModelConfig, parse_model_options
from icml26zoo.moe.multimodal import ConfSMoEClassifier, ConfSMoEConfig, unpack_points
from icml26zoo.registry import register_model
from icml26zoo.validation import check_int


@dataclasses.dataclass(frozen=True)
class ConfSMoEOptions:
    """The confsmoe model's options (ModelConfig.model_options)."""

    # F_m per modality (at least 2 modalities); must match the dataset's.
    feature_dims: tuple[int, ...] = (6, 10)
    # Tokens S per modality.
    tokens: int = 8
    # Classes C.
    num_classes: int = 4

    def __post_init__(self) -> None:
        owner = f"{MODEL_OPTIONS_FIELD}: confsmoe option"
        dims = self.feature_dims
        if not isinstance(dims, tuple) or len(dims) < 2:
            raise ValueError(f"{owner} 'feature_dims' must name at least 2 modalities, got {dims!r}")
        for dim in dims:
            check_int(f"{owner} 'feature_dims' entries", dim)
        check_int(f"{owner} 'tokens'", self.tokens)
        check_int(f"{owner} 'num_classes'", self.num_classes, minimum=2)


def classifier_config(cfg: ModelConfig, options: ConfSMoEOptions) -> ConfSMoEConfig:
    """The `ConfSMoEConfig` that `cfg` and its options describe; ValueError naming model.moe when it is None."""
    if cfg.moe is None:
        raise ValueError("model.moe must be a MoEConfig for model 'confsmoe' (its fusion layers are MoE "
                         "feed-forwards), got None")
    return ConfSMoEConfig(feature_dims=options.feature_dims, tokens=options.tokens, dim=cfg.d_model,
                          num_classes=options.num_classes, num_layers=cfg.num_layers, num_heads=cfg.num_heads,
                          moe=cfg.resolved_moe)


@register_model("confsmoe")
class ConfSMoE(nnx.Module):
    """The ConfSMoE classifier over a feature batch (module docstring)."""

    LANGUAGE_MODEL = False
    options_class = ConfSMoEOptions

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.cfg = cfg
        self.options = parse_model_options(ConfSMoEOptions, cfg, owner="confsmoe model")
        self.classifier = ConfSMoEClassifier(classifier_config(cfg, self.options), rngs=rngs)

    def unpack(self, points: jax.Array, features: jax.Array, weights: jax.Array
               ) -> tuple[tuple[jax.Array, ...], jax.Array, jax.Array]:
        """The classifier's (inputs, present, to_fill) from a batch (`moe.multimodal.unpack_points`)."""
        return unpack_points(points, features, weights, self.options.feature_dims, self.options.tokens)

    def classify(self, points: jax.Array, features: jax.Array, weights: jax.Array, *, impute: bool = True,
                 rng: jax.Array | None = None) -> tuple[jax.Array, list[dict[str, Any]]]:
        """(logits [B, C] float32, one aux dict per fusion layer) of the inputs as they are (no fill drawn)."""
        inputs, present, _ = self.unpack(points, features, weights)
        return self.classifier(inputs, present, impute=impute, rng=rng)

    def __call__(self, points: jax.Array, features: jax.Array, weights: jax.Array) -> jax.Array:
        """Logits [B, C] with stage-2 imputation and no routing noise."""
        return self.classify(points, features, weights)[0]
