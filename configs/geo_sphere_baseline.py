"""The set_transformer baseline on zoo_sphere: per-point regression of a smoothed spherical field (162 points).

d_model 64, 2 layers, GELU MLP 256: 105k parameters, against SoLA's 100k (`geo_sola_sphere`, same data and
schedule). Trained on the canonical lattice, evaluated on rotated lattices (the dataset's default): the
baseline reads absolute directions, so its relative L2 error (eval/loss) can grow under rotation.
"""

import dataclasses

from icml26zoo.configs import geo_sola_sphere
from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import TrainConfig


def get_config() -> TrainConfig:
    # The data, objective and training recipe are geo_sola_sphere's, so the two differ only in the model.
    model = ModelConfig(name="set_transformer", d_model=64, num_layers=2, num_heads=4, mlp_activation="gelu",
                        model_options=(("num_outputs", 1), ("readout", "point"), ("feature_dim", 3)))
    return dataclasses.replace(geo_sola_sphere.get_config(), model=model)
