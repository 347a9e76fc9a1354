"""CAMP on scikit-learn's digits split into left / right halves (zoo_digit_halves, 10 classes, 32 pixels per
modality, 30% of the modalities missing): the `camp` preset's model and recipe with the digits' sizes.
`python -m icml26zoo.train --config camp_digits --workdir /tmp/camp_digits` (needs the [sklearn] extra).
"""

import dataclasses

from icml26zoo.configs import camp
from icml26zoo.train.config import DataConfig, TrainConfig


def get_config() -> TrainConfig:
    config = camp.get_config()
    options = dict(config.model.model_options) | {"feature_dims": (32, 32), "num_classes": 10}
    model = dataclasses.replace(config.model, model_options=tuple(options.items()))
    data = DataConfig(name="zoo_digit_halves", task_options=(("missing_rate", 0.3),))
    return dataclasses.replace(config, model=model, data=data)
