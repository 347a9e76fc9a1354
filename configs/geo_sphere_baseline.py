"""The set_transformer baseline on zoo_sphere: per-point regression of a smoothed spherical field (162 points).

d_model 64, 2 layers, GELU MLP 256: 105k parameters, against SoLA's 100k (`geo_sola_sphere`, same data and
schedule). Trained on the canonical lattice, evaluated on rotated lattices (the dataset's default): the
baseline reads absolute directions, so its relative L2 error (eval/loss) can grow under rotation.
"""

from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig

NUM_POINTS = 162


def get_config() -> TrainConfig:
    model = ModelConfig(name="set_transformer", d_model=64, num_layers=2, num_heads=4, mlp_activation="gelu",
                        model_options=(("num_outputs", 1), ("readout", "point"), ("feature_dim", 3)))
    data = DataConfig(name="zoo_sphere", task_options=(("num_points", NUM_POINTS),))
    return TrainConfig(model=model, data=data, objective="point_regression",
                       optim=OptimConfig(learning_rate=1e-3, warmup_steps=30, weight_decay=0.01),
                       batch_size=16, seq_len=NUM_POINTS, num_steps=300, log_every=25, eval_every=100,
                       eval_batches=0, checkpoint_every=0, sample_length=0, tensorboard=False)
