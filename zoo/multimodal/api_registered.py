"""`api`: the API model (`multimodal.api.APIModel`) as a registered model of the shared trainer.

It reads the feature batches of dataset `zoo_msa` (`train.data.msa_data`): the three modalities stacked along the
points (rows m·T .. (m+1)·T − 1 are modality m, zero-padded to the widest), their availability in the weights.
Train it with objective `api` (`losses.api_objective`); the preset is `api`:

    python -m icml26zoo.train --config api --workdir /tmp/api

Model options (`model.model_options`) are `APIConfig`'s fields except `dim` and `num_heads`, which are
`model.d_model` and `model.num_heads`. Set `cache_size` to the number of training examples: the SCOPE prototypes
and their epoch cache are model variables (not parameters), carried between steps by the trainer.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.models.config import ModelConfig, parse_model_options
from icml26zoo.multimodal.api import MODALITIES, APIConfig, APIModel, APIOutput
from icml26zoo.registry import register_model
from icml26zoo.validation import check_float_array, check_shape

__all__ = ["APIRegressor", "api_config"]


def api_config(cfg: ModelConfig) -> APIConfig:
    """The `APIConfig` of model config `cfg` (module docstring); ValueError naming model.model_options."""
    return parse_model_options(APIConfig, cfg, owner="api model",
                               fixed={"dim": cfg.d_model, "num_heads": cfg.num_heads})


@register_model("api")
class APIRegressor(nnx.Module):
    """The API sentiment regressor on stacked-modality feature batches (module docstring); `.api` is the model."""

    LANGUAGE_MODEL = False
    options_class = APIConfig

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.config = api_config(cfg)
        self.api = APIModel(self.config, rngs=rngs)

    def unpack(self, points: jax.Array, weights: jax.Array) -> tuple[tuple[jax.Array, ...], jax.Array]:
        """((text [B, T, D_t], audio [B, T, D_a], vision [B, T, D_v]), available [B, 3] bool) from points
        [B, N, W] and weights [B, N] (N >= 3T, W >= the widest modality); a modality is available when any of its
        rows has a positive weight."""
        length, dims = self.config.seq_len, self.config.input_dims
        check_float_array("points", points, (None, None, None), "[B, N, W]")
        batch, num_points, width = points.shape
        if num_points < len(MODALITIES) * length or width < max(dims):
            raise ValueError(f"points must be [B, N >= {len(MODALITIES) * length}, W >= {max(dims)}] (3 modalities of "
                             f"T = {length} rows, widths {dims}), got {points.shape}")
        check_shape("weights", weights, (batch, num_points), "[B, N]")
        sequences = tuple(points[:, m * length:(m + 1) * length, :dims[m]] for m in range(len(MODALITIES)))
        rows = weights[:, : len(MODALITIES) * length].reshape(batch, len(MODALITIES), length)
        return sequences, jnp.any(rows > 0, axis=2)

    def __call__(self, points: jax.Array, weights: jax.Array, available: jax.Array | None = None,
                 labels: jax.Array | None = None, *, train: bool = False, rngs: nnx.Rngs | None = None) -> APIOutput:
        """`APIModel` on a feature batch: points [B, N, W], weights [B, N]; available [B, 3] bool replaces the
        availability the weights give (the objective's training draw); labels [B] sentiment (training)."""
        sequences, given = self.unpack(points, weights)
        available = given if available is None else available
        return self.api(*sequences, available, labels, train=train, rngs=rngs)
