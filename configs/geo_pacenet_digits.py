"""PACENet (icml26zoo.geometric.pace: compression-expansion attention from the MCR² objective) on zoo_digit_patches.

d_model 64, 4 heads, 4 blocks, sketch rank 8 (< the 16 tokens, so that training draws a fresh Gaussian sketch
of the covariance every step; at rank >= 16 the model uses the exact covariance): 184k parameters, against the
set_transformer baseline's 172k (`geo_digits_baseline`, same data and schedule). The 16 tokens are the 2x2
patches of each 8x8 digit (points: patch centres, features: 4 intensities); evaluated on the 360 held-out test
images. Needs the sklearn extra.
"""

from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig

NUM_PATCHES = 16


def get_config() -> TrainConfig:
    model = ModelConfig(name="pacenet", d_model=64, num_layers=4, num_heads=4,
                        model_options=(("num_outputs", 10), ("readout", "pool"), ("point_dim", 2),
                                       ("num_features", 4), ("sketch_rank", 8)))
    return TrainConfig(model=model, data=DataConfig(name="zoo_digit_patches", eval_split="test"),
                       objective="set_classification",
                       optim=OptimConfig(learning_rate=1e-3, warmup_steps=30, weight_decay=0.01),
                       batch_size=64, seq_len=NUM_PATCHES, num_steps=300, log_every=25, eval_every=100,
                       eval_batches=0, checkpoint_every=0, sample_length=0, tensorboard=False)
