"""The set_transformer baseline on zoo_darcy_amr: one-step pressure-increment prediction on adaptive meshes.

d_model 88, 2 layers, GELU MLP: 197k parameters, against APT's 200k (`geo_apt_darcy`, same data and schedule).
Nodes (up to 224 per mesh) carry (p_a, k, q) and their coordinates in [0, 1]²; the loss is the quadrature-weighted
relative L2 error of the increment (objective point_regression).
"""

import dataclasses

from icml26zoo.configs import geo_apt_darcy
from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import TrainConfig


def get_config() -> TrainConfig:
    # The data, objective and training recipe are geo_apt_darcy's, so the two differ only in the model.
    model = ModelConfig(name="set_transformer", d_model=88, num_layers=2, num_heads=4, mlp_activation="gelu",
                        model_options=(("num_outputs", 1), ("readout", "point"), ("point_dim", 2),
                                       ("feature_dim", 3)))
    return dataclasses.replace(geo_apt_darcy.get_config(), model=model)
