"""XR-1's moving-sprite scenes (`robotics.make_sprite_data`: a condition and a target frame, the action chunk that
moves the robot between them; robot, second-embodiment and human / vision-only scenes) as a feature dataset.

Split s draws its scenes from the integer seed SeedSequence([seed, s]).generate_state(1)[0].

Batch layout (`train.data.features`), S = image_size, T = chunk, N = seq_len >= 2S² + T points per row:
    points   float32 [b, N, 4]  rows 0 .. S² − 1 the condition frame's pixels (row-major, RGB, 4th column 0), rows
                                S² .. 2S² − 1 the target frame's, rows 2S² .. 2S² + T − 1 the action chunk (4 values;
                                zeros for a human scene)
    weights  float32 [b, N]     1 on the frames' rows; on the chunk's rows 1 for scenes with actions (robot, second
                                embodiment), 0 for human scenes; 0 on padding
    labels   int32   [b]        the scene's kind (robotics.ROBOT, EMBODIMENT2, HUMAN)
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow_datasets as tfds

from icml26zoo.robotics import ACTION_DIM, SpriteData, make_sprite_data
from icml26zoo.train.data.features import FeatureDataset, feature_spec
from icml26zoo.train.data.generated import Examples, GeneratedBuilder, split_seed, split_size
from icml26zoo.train.data.msa_data import integer_seed
from icml26zoo.train.data.registry import register_dataset
from icml26zoo.train.data.tasks import TaskOptions, check_option, make_config

WIDTH = ACTION_DIM  # the widest row: an action (4) against a pixel (3)


@dataclasses.dataclass(frozen=True)
class SpriteOptions(TaskOptions):
    """Moving-sprite scenes: frame side S and action chunk length T."""

    image_size: int = 32
    chunk: int = 16
    train_examples: int = 2048
    eval_examples: int = 256

    def __post_init__(self) -> None:
        super().__post_init__()
        check_option("image_size", self.image_size, 9)
        check_option("chunk", self.chunk, 1)


def pack_scenes(data: SpriteData) -> tuple[np.ndarray, np.ndarray]:
    """(points float32 [E, 2S² + T, 4], weights float32 [E, 2S² + T]) of scenes `data` (module docstring)."""
    count, size = data.condition.shape[:2]
    pixels = size * size
    points = np.zeros((count, 2 * pixels + data.actions.shape[1], WIDTH), np.float32)
    points[:, :pixels, :3] = data.condition.reshape(count, pixels, 3)
    points[:, pixels:2 * pixels, :3] = data.target.reshape(count, pixels, 3)
    points[:, 2 * pixels:] = data.actions
    weights = np.ones(points.shape[:2], np.float32)
    weights[:, 2 * pixels:] = data.has_actions[:, None]
    return points, weights


class ZooSprites(GeneratedBuilder):
    """Examples {"points": [2S² + T, 4], "weights": [2S² + T], "label": kind} (float32, int32)."""

    BUILDER_CONFIGS = [make_config(SpriteOptions())]

    def _features(self) -> dict[str, tfds.features.FeatureConnector]:
        options = self.builder_config.options
        return feature_spec(2 * options.image_size**2 + options.chunk, WIDTH, 0)

    def _generate_examples(self, split: str) -> Examples:
        config = self.builder_config
        options = config.options
        data = make_sprite_data(integer_seed(split_seed(config, split)), split_size(config, split),
                                image_size=options.image_size, chunk=options.chunk)
        points, weights = pack_scenes(data)
        for index, kind in enumerate(data.kind):
            yield f"{index:08d}", {"points": points[index], "weights": weights[index], "label": np.int32(kind)}


@register_dataset("zoo_sprites")
class SpriteDataset(FeatureDataset):
    """XR-1's moving-sprite scenes (frames and action chunks), for model "xr1" (objective "xr1_stage1")."""

    name, options_class, builder_class = "zoo_sprites", SpriteOptions, ZooSprites

    def max_points(self, options: TaskOptions) -> int:
        return 2 * options.image_size**2 + options.chunk
