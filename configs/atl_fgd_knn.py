"""The RDesign-style static baseline of `atl_fgd_atl`: no gates, the k = 8 nearest nucleotides, messages summed and
divided by k (aggregation sum_over_k), RBF range 20 Å; same data, width, depth and recipe.
`python -m icml26zoo.train --config atl_fgd_knn --workdir /tmp/knn`.
"""

import dataclasses

from icml26zoo.configs import atl_fgd_atl
from icml26zoo.train.config import TrainConfig


def get_config() -> TrainConfig:
    config = atl_fgd_atl.get_config()
    options = dict(config.model.model_options) | {"k": 8, "k_max": 8, "rbf_max": 20.0, "gate_kind": "none",
                                                   "aggregation": "sum_over_k"}
    return dataclasses.replace(config, model=dataclasses.replace(config.model, model_options=tuple(options.items())))
