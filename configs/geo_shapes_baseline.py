"""The set_transformer baseline (icml26zoo.geometric.baseline) on zoo_shapes: 8 surfaces, 128 points per cloud.

Trained in the canonical pose and evaluated on randomly rotated clouds (the dataset's default), so eval/accuracy
measures what a non-equivariant model keeps under rotation (chance 1/8). About the size of the platonic and
spikenet presets on the same task (60k parameters against 54k and 52k). `python -m icml26zoo.train --config
geo_shapes_baseline --workdir /tmp/geo`; `data.task_options="(('eval_rotate', False),)"` evaluates unrotated.
"""

import dataclasses

from icml26zoo.configs import geo_platonic_shapes
from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import TrainConfig


def get_config() -> TrainConfig:
    # The data, objective and training recipe are geo_platonic_shapes's, so the two differ only in the model.
    model = ModelConfig(name="set_transformer", d_model=48, num_layers=2, num_heads=4, mlp_activation="gelu",
                        model_options=(("num_outputs", 8), ("readout", "pool")))
    return dataclasses.replace(geo_platonic_shapes.get_config(), model=model)
