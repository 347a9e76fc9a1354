"""ConfSMoE's multimodal classifier (model "confsmoe", objective "multimodal_moe") on `zoo_multimodal`, setting II.

The small-scale setting of docs/papers/confsmoe.md: 3 modalities (feature widths 6, 10, 4), S = 8 tokens each,
50% of the (sample, modality) entries missing in training and test, 2048 / 512 samples; one fusion layer of
width d = 64, E = 8 experts, k = 2, the "confidence" router, no balancing or z-loss; Adam at a constant 3e-4
(no clipping, no decay), 600 steps of 32 samples. Other settings and routers by override, e.g.
`data.task_options=(("feature_dims", (6, 10, 4)), ("signal", (1.0, 1.0, 1.0)), ("tokens", 8), ("setting", "III"),
("modality_missing_rates", (0.3, 0.3, 0.3)))` or `model.moe.router=topk_softmax`; keep the model's
`model_options` (feature_dims, tokens, num_classes) equal to the data's.

    python -m icml26zoo.train --config confsmoe_multimodal --workdir runs/confsmoe
"""

from icml26zoo.models.config import ModelConfig
from icml26zoo.moe import MoEConfig
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig

FEATURE_DIMS = (6, 10, 4)
TOKENS = 8
NUM_CLASSES = 4


def get_config() -> TrainConfig:
    modalities = len(FEATURE_DIMS)
    data = DataConfig(name="zoo_multimodal", task_options=(
        ("num_classes", NUM_CLASSES), ("feature_dims", FEATURE_DIMS), ("tokens", TOKENS),
        ("signal", (1.0,) * modalities), ("setting", "II"), ("missing_ratio", 0.5),
        ("modality_missing_rates", (0.3,) * modalities), ("train_examples", 2048), ("eval_examples", 512)))
    moe = MoEConfig(num_experts=8, top_k=2, router="confidence", load_balance_weight=0.0, z_loss_weight=0.0)
    model = ModelConfig(name="confsmoe", d_model=64, num_layers=1, num_heads=4, num_kv_heads=4, moe=moe,
                        model_options=(("feature_dims", FEATURE_DIMS), ("tokens", TOKENS),
                                       ("num_classes", NUM_CLASSES)))
    optim = OptimConfig(name="adam", learning_rate=3e-4, warmup_steps=0, end_lr_fraction=1.0, b2=0.999,
                        weight_decay=0.0, grad_clip_norm=0.0)
    return TrainConfig(model=model, data=data, optim=optim, objective="multimodal_moe", batch_size=32,
                       seq_len=modalities * TOKENS, num_steps=600, log_every=50, eval_every=0, eval_batches=0,
                       checkpoint_every=0, sample_length=0, tensorboard=False)
