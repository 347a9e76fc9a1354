"""A 2-layer, 64-wide FoX with the "Pro" block (arXiv 2503.02130) on the built-in byte corpus.

fox_tiny plus `pro=True` (QK-norm, data-dependent token shift of k and v, output norm and output gate) and the
Pro block's MLP hidden ratio 3.5 instead of 4 (`fox_parts.pro_mlp_dim`, rounded to a multiple of 8 at this
width: mlp_dim 152 where ratio 4 would give 176), which pays for the Pro projections as in FoX's configs.
"""

import dataclasses

from icml26zoo.mixers.fox_parts import pro_mlp_dim
from icml26zoo.train.presets import tiny_byte_lm


def get_config():
    config = tiny_byte_lm("fox", (("pro", True),))
    model = dataclasses.replace(config.model, mlp_dim=pro_mlp_dim(config.model.d_model, multiple_of=8))
    return dataclasses.replace(config, model=model)
