"""The set_transformer baseline on zoo_digit_patches: scikit-learn digits as 16 points of 2x2 patches.

d_model 64, 4 layers, 4 heads, GELU MLP 192: 172k parameters, against PACENet's 184k (`geo_pacenet_digits`, same
data and schedule). Points are the patch centres in 2-D, features the 4 intensities; evaluated on the held-out
360 test images (data.eval_split="test"). Needs the sklearn extra.
"""

import dataclasses

from icml26zoo.configs import geo_pacenet_digits
from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import TrainConfig


def get_config() -> TrainConfig:
    # The data, objective and training recipe are geo_pacenet_digits's, so the two differ only in the model.
    model = ModelConfig(name="set_transformer", d_model=64, num_layers=4, num_heads=4, mlp_activation="gelu",
                        mlp_dim=192, model_options=(("num_outputs", 10), ("readout", "pool"), ("point_dim", 2),
                                                    ("feature_dim", 4)))
    return dataclasses.replace(geo_pacenet_digits.get_config(), model=model)
