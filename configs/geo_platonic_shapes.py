"""The Platonic Transformer (icml26zoo.geometric.platonic, octahedral group, G = 24) on zoo_shapes.

d_model 192 = G·C with C = 8 channels per frame, 48 heads = G·2 (D_h = 4), 3 layers: 54k parameters, against the
set_transformer baseline's 60k (`geo_shapes_baseline`, same data and schedule). Trained canonical, evaluated on
randomly rotated clouds: the model is invariant to the 24 octahedral rotations only, so the rotated accuracy
shows how much that finite group buys over no symmetry. `python -m icml26zoo.train --config geo_platonic_shapes`.
RoPE frequency scale σ = 5 (the model's default is the paper's 1.0): the clouds are about one unit across, so at
σ = 1 the rotary angles barely differ between points and the model stayed at chance for 100 steps; σ = 5 was
picked on a 40-step sphere-vs-cube check before any reported run (docs/papers/platonic_transformer.md).
"""

from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig

NUM_POINTS = 128


def get_config() -> TrainConfig:
    model = ModelConfig(name="platonic", d_model=192, num_layers=3, num_heads=48,
                        model_options=(("num_outputs", 8), ("readout", "pool"), ("group", "octahedral"),
                                       ("rope_sigma", 5.0)))
    data = DataConfig(name="zoo_shapes", task_options=(("num_points", NUM_POINTS),))
    return TrainConfig(model=model, data=data, objective="set_classification",
                       optim=OptimConfig(learning_rate=1e-3, warmup_steps=30, weight_decay=0.01),
                       batch_size=32, seq_len=NUM_POINTS, num_steps=300, log_every=25, eval_every=100,
                       eval_batches=0, checkpoint_every=0, sample_length=0, tensorboard=False)
