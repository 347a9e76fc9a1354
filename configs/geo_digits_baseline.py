"""The set_transformer baseline on zoo_digit_patches: scikit-learn digits as 16 points of 2x2 patches.

d_model 64, 4 layers, 4 heads, GELU MLP 192: 172k parameters, against PACENet's 184k (`geo_pacenet_digits`, same
data and schedule). Points are the patch centres in 2-D, features the 4 intensities; evaluated on the held-out
360 test images (data.eval_split="test"). Needs the sklearn extra.
"""

from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig

NUM_PATCHES = 16


def get_config() -> TrainConfig:
    model = ModelConfig(name="set_transformer", d_model=64, num_layers=4, num_heads=4, mlp_activation="gelu",
                        mlp_dim=192, model_options=(("num_outputs", 10), ("readout", "pool"), ("point_dim", 2),
                                                    ("feature_dim", 4)))
    return TrainConfig(model=model, data=DataConfig(name="zoo_digit_patches", eval_split="test"),
                       objective="set_classification",
                       optim=OptimConfig(learning_rate=1e-3, warmup_steps=30, weight_decay=0.01),
                       batch_size=64, seq_len=NUM_PATCHES, num_steps=300, log_every=25, eval_every=100,
                       eval_batches=0, checkpoint_every=0, sample_length=0, tensorboard=False)
