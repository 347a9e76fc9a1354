"""A 2-layer, 64-wide Llama whose feed-forwards are 4 SwiGLU experts (top-2 softmax router, dropless) on
the built-in byte corpus, trained with objective "lm_moe" (cross-entropy plus the routers' load-balancing
and z-losses). Other routers by override, e.g. `model.moe.router=mahalanobis`.
"""

import dataclasses

from icml26zoo.moe import MoEConfig
from icml26zoo.train.config import TrainConfig
from icml26zoo.train.presets import tiny_byte_lm


def get_config() -> TrainConfig:
    config = tiny_byte_lm("attention")
    model = dataclasses.replace(config.model, moe=MoEConfig(num_experts=4, top_k=2, router="topk_softmax"))
    return dataclasses.replace(config, model=model, objective="lm_moe")
