"""XR-1 stage 1 (icml26zoo.robotics.XR1: the dual-branch VQ-VAE with KL alignment, from the official code at small
sizes) on the moving-sprite scenes (zoo_sprites: 32×32 frames, chunks of 16 actions; 2,048 training and 256 eval
scenes, about half robot, a quarter second embodiment, a quarter human / vision-only).

Width 32, one head, 2 blocks per stack (1 in the patch-ViT), 64-code codebooks of dimension 32, KL weight 10 (the
official 10·kl_loss_w). AdamW 1e-3 (β 0.9 / 0.95, weight decay 1e-4 on matrices), 30 warm-up steps then cosine to
1e-5; 400 steps of 16 scenes. `python -m icml26zoo.train --config xr1 --workdir /tmp/xr1`.
"""

from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig

IMAGE_SIZE = 32
CHUNK = 16
LAYERS = 2


def get_config() -> TrainConfig:
    options = (("image_size", IMAGE_SIZE), ("chunk", CHUNK), ("vit_layers", LAYERS - 1), ("mformer_layers", LAYERS),
               ("decoder_layers", LAYERS), ("action_layers", LAYERS), ("head_layers", LAYERS), ("kl_weight", 10.0))
    model = ModelConfig(name="xr1", d_model=32, num_layers=1, num_heads=1, num_kv_heads=1, model_options=options)
    data = DataConfig(name="zoo_sprites", task_options=(("image_size", IMAGE_SIZE), ("chunk", CHUNK),
                                                        ("train_examples", 2048), ("eval_examples", 256)))
    optim = OptimConfig(name="adamw", learning_rate=1e-3, warmup_steps=30, end_lr_fraction=0.01, weight_decay=1e-4,
                        b1=0.9, b2=0.95, grad_clip_norm=0.0)
    return TrainConfig(model=model, data=data, optim=optim, objective="xr1_stage1", batch_size=16,
                       seq_len=2 * IMAGE_SIZE**2 + CHUNK, num_steps=400, log_every=20, eval_every=0, eval_batches=0,
                       checkpoint_every=0, sample_length=0, tensorboard=False)
