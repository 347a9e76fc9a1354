"""The late-fusion baseline of CAMP's experiment: a one-hidden-layer (64 ReLU) classifier on the concatenated,
missing-zeroed embeddings and the presence mask (model camp_concat, objective set_classification), on the
`camp` preset's data and recipe. `python -m icml26zoo.train --config camp_concat --workdir /tmp/camp_concat`.
"""

import dataclasses

from icml26zoo.configs import camp
from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import TrainConfig


def get_config() -> TrainConfig:
    config = camp.get_config()
    model = ModelConfig(name="camp_concat", d_model=64, num_layers=1, num_heads=1, num_kv_heads=1,
                        model_options=(("feature_dims", camp.FEATURE_DIMS), ("num_classes", camp.NUM_CLASSES),
                                       ("hidden", 64)))
    return dataclasses.replace(config, model=model, objective="set_classification", objective_options=())
