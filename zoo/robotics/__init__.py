"""Robot learning: XR-1's stage-1 dual-branch VQ-VAE (Unified Vision-Motion Codes, from the official code at
small sizes) and the synthetic moving-sprite video + action dataset it is tested and trained on.

    sprites   the seeded sprite scenes: condition/target frames, action chunks, robot / second-embodiment /
              human (vision-only) subsets
    xr1       the vision branch (patch-ViT, M-Former, VQ, decoder), the causal action branch (VQ, flow head),
              the KL alignment and the masked stage-1 loss
    xr1_registered  model `xr1` for the shared trainer (feature batches of dataset zoo_sprites)
"""

from icml26zoo.robotics.sprites import (
    ACTION_DIM,
    EMBODIMENT2,
    HUMAN,
    ROBOT,
    SpriteData,
    make_sprite_data,
)
from icml26zoo.robotics.xr1 import (
    XR1,
    XR1Config,
    XR1Output,
    causal_mask,
    check_batch,
    kl_alignment,
    sinusoidal_positions,
)
from icml26zoo.robotics.xr1_registered import XR1Trainable

__all__ = ["ACTION_DIM", "EMBODIMENT2", "HUMAN", "ROBOT", "XR1", "XR1Config", "XR1Output", "XR1Trainable", "SpriteData",
           "causal_mask", "check_batch", "kl_alignment", "make_sprite_data", "sinusoidal_positions"]
