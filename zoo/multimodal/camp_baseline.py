"""`camp_concat`: the late-fusion baseline of CAMP's experiment, a classifier on the concatenated embeddings.

Input per row: [e_1 · present_1, ..., e_M · present_M, present] ∈ R^{Σ d_m + M} (a missing modality's embedding
is zeroed and its absence is an input, so the classifier can learn what missingness means). hidden = 0 is a
linear classifier (logistic regression); hidden > 0 one ReLU layer of that width. Same feature batches as
`camp` (zoo.multimodal.camp): model(points [B, N, F], features [B, N, 0], weights [B, N]) -> logits [B, C];
trained by objective "set_classification".
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.models.config import MODEL_OPTIONS_FIELD, ModelConfig, parse_model_options
from icml26zoo.multimodal.camp import check_feature_dims, unpack_embeddings
from icml26zoo.registry import register_model
from icml26zoo.validation import check_int


@dataclasses.dataclass(frozen=True)
class ConcatOptions:
    """The camp_concat model's options (ModelConfig.model_options; d_model is not used)."""

    feature_dims: tuple[int, ...] = (32, 32)
    num_classes: int = 3
    # Width of the hidden ReLU layer; 0: a linear classifier.
    hidden: int = 64

    def __post_init__(self) -> None:
        owner = f"{MODEL_OPTIONS_FIELD}: camp_concat option"
        check_feature_dims(f"{owner} 'feature_dims'", self.feature_dims)
        check_int(f"{owner} 'num_classes'", self.num_classes, minimum=2)
        check_int(f"{owner} 'hidden'", self.hidden, minimum=0)


@register_model("camp_concat")
class ConcatClassifier(nnx.Module):
    """Linear or one-hidden-layer classifier on the masked, concatenated embeddings (module docstring)."""

    LANGUAGE_MODEL = False
    options_class = ConcatOptions

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.options = parse_model_options(ConcatOptions, cfg, owner="camp_concat model")
        width = sum(self.options.feature_dims) + len(self.options.feature_dims)
        hidden, classes = self.options.hidden, self.options.num_classes
        self.hidden = nnx.Linear(width, hidden, rngs=rngs) if hidden else None
        self.out = nnx.Linear(hidden or width, classes, rngs=rngs)

    def classify(self, embeddings: tuple[jax.Array, ...], present: jax.Array) -> jax.Array:
        """logits [B, C] from the embeddings e_m [B, d_m] and present [B, M] in {0, 1}."""
        present = present.astype(jnp.float32)
        x = jnp.concatenate([e * present[:, m:m + 1] for m, e in enumerate(embeddings)] + [present], axis=-1)
        if self.hidden is not None:
            x = jax.nn.relu(self.hidden(x))
        return self.out(x)

    def __call__(self, points: jax.Array, features: jax.Array, weights: jax.Array) -> jax.Array:
        del features
        return self.classify(*unpack_embeddings(points, weights, self.options.feature_dims))
