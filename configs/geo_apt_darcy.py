"""APT (icml26zoo.geometric.apt: local graph neural operator + global Perceiver, gated fusion) on zoo_darcy_amr.

The spec's small setting: D = 64, 4 heads, 2 local layers (radius 0.08, k_max 32), M = 32 latents, 2 latent
layers: 200k parameters, against the set_transformer baseline's 197k (`geo_darcy_baseline`, same data and
schedule). Predicts the per-node pressure increment over one step from (p_a, k, q) on adaptively refined nodes.
"""

from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig

MAX_NODES = 224


def get_config() -> TrainConfig:
    model = ModelConfig(name="apt", d_model=64, num_layers=2, num_heads=4,
                        model_options=(("num_outputs", 1), ("readout", "point"), ("point_dim", 2),
                                       ("feature_dim", 3)))
    return TrainConfig(model=model, data=DataConfig(name="zoo_darcy_amr"), objective="point_regression",
                       optim=OptimConfig(learning_rate=1e-3, warmup_steps=30, weight_decay=0.01),
                       batch_size=8, seq_len=MAX_NODES, num_steps=300, log_every=25, eval_every=100,
                       eval_batches=0, checkpoint_every=0, sample_length=0, tensorboard=False)
