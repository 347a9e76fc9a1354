"""The set_transformer baseline on zoo_darcy_amr: one-step pressure-increment prediction on adaptive meshes.

d_model 88, 2 layers, GELU MLP: 197k parameters, against APT's 200k (`geo_apt_darcy`, same data and schedule).
Nodes (up to 224 per mesh) carry (p_a, k, q) and their coordinates in [0, 1]²; the loss is the quadrature-weighted
relative L2 error of the increment (objective point_regression).
"""

from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig

MAX_NODES = 224


def get_config() -> TrainConfig:
    model = ModelConfig(name="set_transformer", d_model=88, num_layers=2, num_heads=4, mlp_activation="gelu",
                        model_options=(("num_outputs", 1), ("readout", "point"), ("point_dim", 2),
                                       ("feature_dim", 3)))
    return TrainConfig(model=model, data=DataConfig(name="zoo_darcy_amr"), objective="point_regression",
                       optim=OptimConfig(learning_rate=1e-3, warmup_steps=30, weight_decay=0.01),
                       batch_size=8, seq_len=MAX_NODES, num_steps=300, log_every=25, eval_every=100,
                       eval_batches=0, checkpoint_every=0, sample_length=0, tensorboard=False)
