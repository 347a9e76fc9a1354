"""Building blocks shared by the zoo's models: norms, MLPs, rotary embeddings, embeddings, residuals."""

from zoo.layers.embed import Embedding
from zoo.layers.mlp import SwiGLU
from zoo.layers.norms import RMSNorm
from zoo.layers.residual import NORM_PLACEMENTS, Residual
from zoo.layers.rope import apply_rope, rope_inverse_frequencies

__all__ = [
    "NORM_PLACEMENTS",
    "Embedding",
    "RMSNorm",
    "Residual",
    "SwiGLU",
    "apply_rope",
    "rope_inverse_frequencies",
]
