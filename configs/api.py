"""API (icml26zoo.multimodal.api: SCOPE prototypes + DIAM personalisation) on synthetic multimodal sentiment with
missing modalities (zoo_msa: text 32-d, audio 8-d, vision 12-d, T = 20; 1,024 complete training samples and 512 eval
samples with each modality missing with probability 0.5).

Model d = 16, 2 heads, 2 cross-modal and 3 memory layers, Conv1d kernel 5, the DIAM fill; its epoch cache holds the
1,024 training samples, so the prototypes are rebuilt after every epoch (16 steps of 64). Objective api (each row
trains with 1-3 random available modalities); Adam 1e-3 (β₂ 0.999), gradients clipped element-wise at 0.6, as the
official trainer; 8 epochs. `python -m icml26zoo.train --config api --workdir /tmp/api`.
"""

from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig

TRAIN_EXAMPLES = 1024
BATCH_SIZE = 64
EPOCHS = 8
SEQUENCE_LENGTH = 20


def get_config() -> TrainConfig:
    model = ModelConfig(name="api", d_model=16, num_layers=1, num_heads=2, num_kv_heads=2,
                        model_options=(("seq_len", SEQUENCE_LENGTH), ("kernel_size", 5), ("cross_layers", 2),
                                       ("memory_layers", 3), ("fill", "diam"), ("cache_size", TRAIN_EXAMPLES)))
    data = DataConfig(name="zoo_msa", task_options=(("sequence_length", SEQUENCE_LENGTH), ("missing_rate", 0.5),
                                                    ("train_examples", TRAIN_EXAMPLES), ("eval_examples", 512)))
    optim = OptimConfig(name="adam", learning_rate=1e-3, warmup_steps=0, end_lr_fraction=1.0, weight_decay=0.0,
                        b2=0.999, grad_clip_norm=0.0, grad_clip_value=0.6)
    return TrainConfig(model=model, data=data, optim=optim, objective="api", batch_size=BATCH_SIZE,
                       seq_len=3 * SEQUENCE_LENGTH, num_steps=EPOCHS * TRAIN_EXAMPLES // BATCH_SIZE, log_every=16,
                       eval_every=0, eval_batches=0, checkpoint_every=0, sample_length=0, tensorboard=False)
