"""SoLA (icml26zoo.geometric.sola: lifted local attention on the sphere, no positional embedding) on zoo_sphere.

d_model 64, 4 heads, 2 blocks, k = 16 geodesic neighbours, GELU MLP 256: 100k parameters, against the
set_transformer baseline's 105k (`geo_sphere_baseline`, same data and schedule). SoLA depends on the directions
only through their inner products, so its error on the rotated evaluation lattices matches the canonical one.
"""

from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig

NUM_POINTS = 162


def get_config() -> TrainConfig:
    model = ModelConfig(name="sola", d_model=64, num_layers=2, num_heads=4, mlp_activation="gelu",
                        model_options=(("num_outputs", 1), ("readout", "point"), ("feature_dim", 3),
                                       ("neighbours", 16)))
    data = DataConfig(name="zoo_sphere", task_options=(("num_points", NUM_POINTS),))
    return TrainConfig(model=model, data=data, objective="point_regression",
                       optim=OptimConfig(learning_rate=1e-3, warmup_steps=30, weight_decay=0.01),
                       batch_size=16, seq_len=NUM_POINTS, num_steps=300, log_every=25, eval_every=100,
                       eval_batches=0, checkpoint_every=0, sample_length=0, tensorboard=False)
