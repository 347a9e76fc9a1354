"""Building blocks shared by the zoo's models and mixers: norms, MLPs, rotary embeddings, embeddings,
residuals, typed options."""

from icml26zoo.layers.embed import Embedding
from icml26zoo.layers.mlp import SwiGLU
from icml26zoo.layers.norms import GatedRMSNorm, HeadRMSNorm, RMSNorm, rms_normalize
from icml26zoo.layers.residual import NORM_PLACEMENTS, Residual
from icml26zoo.layers.rope import apply_rope, rope_inverse_frequencies

__all__ = [
    "NORM_PLACEMENTS",
    "Embedding",
    "GatedRMSNorm",
    "HeadRMSNorm",
    "RMSNorm",
    "Residual",
    "SwiGLU",
    "apply_rope",
    "rms_normalize",
    "rope_inverse_frequencies",
]
