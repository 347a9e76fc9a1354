"""SpikeNet (icml26zoo.geometric.spikenet: LIF neurons, spiking vector-mask attention, DSSR) on zoo_shapes.

Widths 32-64 (d_model 32, 2 stages), T = 2 time steps, k = 16 neighbours: 52k parameters, against the
set_transformer baseline's 60k (`geo_shapes_baseline`, same data and schedule). SpikeNet is translation- and
permutation-invariant but not rotation-invariant, so the rotated evaluation is a hard test for it too.
`python -m icml26zoo.train --config geo_spikenet_shapes`.
"""

from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig

NUM_POINTS = 128


def get_config() -> TrainConfig:
    model = ModelConfig(name="spikenet", d_model=32, num_layers=2, num_heads=4,
                        model_options=(("num_outputs", 8), ("readout", "pool")))
    data = DataConfig(name="zoo_shapes", task_options=(("num_points", NUM_POINTS),))
    return TrainConfig(model=model, data=data, objective="set_classification",
                       optim=OptimConfig(learning_rate=1e-3, warmup_steps=30, weight_decay=0.01),
                       batch_size=32, seq_len=NUM_POINTS, num_steps=300, log_every=25, eval_every=100,
                       eval_batches=0, checkpoint_every=0, sample_length=0, tensorboard=False)
