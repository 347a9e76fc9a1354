"""The set_transformer baseline (icml26zoo.geometric.baseline) on zoo_shapes: 8 surfaces, 128 points per cloud.

Trained in the canonical pose and evaluated on randomly rotated clouds (the dataset's default), so eval/accuracy
measures what a non-equivariant model keeps under rotation (chance 1/8). About the size of the platonic and
spikenet presets on the same task (60k parameters against 54k and 52k). `python -m icml26zoo.train --config
geo_shapes_baseline --workdir /tmp/geo`; `data.task_options="(('eval_rotate', False),)"` evaluates unrotated.
"""

from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig

NUM_POINTS = 128


def get_config() -> TrainConfig:
    model = ModelConfig(name="set_transformer", d_model=48, num_layers=2, num_heads=4, mlp_activation="gelu",
                        model_options=(("num_outputs", 8), ("readout", "pool")))
    data = DataConfig(name="zoo_shapes", task_options=(("num_points", NUM_POINTS),))
    return TrainConfig(model=model, data=data, objective="set_classification",
                       optim=OptimConfig(learning_rate=1e-3, warmup_steps=30, weight_decay=0.01),
                       batch_size=32, seq_len=NUM_POINTS, num_steps=300, log_every=25, eval_every=100,
                       eval_batches=0, checkpoint_every=0, sample_length=0, tensorboard=False)
