"""A synthetic moving-sprite "robot" dataset for XR-1's stage-1 tokenizer (pure numpy, seeded).

Each sample is a 32×32 RGB scene: a smooth random texture as background, one or two static distractor squares,
and a red "robot" square. An action chunk [T, 4] (T = 16 control steps) moves the robot: dims 0-1 are its 2-D
velocity in pixels per step (divided by ACTION_SCALE so they are O(1)), dims 2-3 are binary gripper commands.
The condition frame shows the robot at its start; the target frame at start + Σ velocity, with its centre pixel
bright when the last command of dim 2 is 1 (so one gripper dim is visible, the other is not).

Subsets (`kind` [N] int):
    ROBOT        actions and frames (the default embodiment)
    EMBODIMENT2  a second robot: the same motion, but its action vector is stored as [vy, vx, g1, g0] and scaled
                 by 0.5 (cross-embodiment: the same visual motion behind a different action layout)
    HUMAN        frames only ("human video"): actions are withheld (zeros) and has_actions = 0
"""

from __future__ import annotations

import dataclasses

import numpy as np

from icml26zoo.validation import check_int, check_interval

__all__ = ["ACTION_DIM", "ACTION_SCALE", "EMBODIMENT2", "HUMAN", "ROBOT", "SpriteData", "make_sprite_data"]

ROBOT, EMBODIMENT2, HUMAN = 0, 1, 2
ACTION_DIM = 4
ACTION_SCALE = 1.0  # pixels per step per action unit (the displacement of a chunk is at most ~ image size)
SPRITE = 5  # robot side in pixels
ROBOT_COLOUR = np.array([0.95, 0.1, 0.1], np.float32)


@dataclasses.dataclass(frozen=True)
class SpriteData:
    """condition, target [N, S, S, 3] float32 in [0, 1]; actions [N, T, 4] float32 (zeros where withheld);
    has_actions [N] float32 (1 robot / embodiment 2, 0 human); kind [N] int32 (ROBOT, EMBODIMENT2, HUMAN)."""

    condition: np.ndarray
    target: np.ndarray
    actions: np.ndarray
    has_actions: np.ndarray
    kind: np.ndarray

    def __len__(self) -> int:
        return len(self.kind)

    def take(self, index: np.ndarray) -> SpriteData:
        """The samples at `index` (an int array or slice)."""
        return SpriteData(*(getattr(self, f.name)[index] for f in dataclasses.fields(self)))


def _texture(rng: np.random.Generator, size: int) -> np.ndarray:
    """[S, S, 3] smooth background: a grey level plus two low-amplitude random plane waves per channel."""
    grid = np.arange(size, dtype=np.float32)[:, None]
    image = np.full((size, size, 3), rng.uniform(0.3, 0.6), np.float32)
    for channel in range(3):
        for _ in range(2):
            fy, fx = rng.uniform(-0.4, 0.4, size=2)
            image[..., channel] += 0.06 * np.sin(fy * grid + fx * grid.T + rng.uniform(0, 2 * np.pi))
    return image


def _paint(image: np.ndarray, top_left: np.ndarray, side: int, colour: np.ndarray) -> None:
    y, x = np.round(top_left).astype(int)
    image[y:y + side, x:x + side] = colour


def _scene(rng: np.random.Generator, size: int) -> np.ndarray:
    background = _texture(rng, size)
    for _ in range(rng.integers(1, 3)):  # 1-2 static distractors, never red
        side = int(rng.integers(3, 6))
        colour = np.array([rng.uniform(0, 0.3), rng.uniform(0.3, 1), rng.uniform(0.3, 1)], np.float32)
        _paint(background, rng.uniform(0, size - side, size=2), side, colour)
    return background


def _robot_frame(background: np.ndarray, position: np.ndarray, gripper_closed: bool) -> np.ndarray:
    frame = background.copy()
    _paint(frame, position, SPRITE, ROBOT_COLOUR)
    if gripper_closed:
        _paint(frame, position + SPRITE // 2, 1, np.ones(3, np.float32))
    return frame


def _chunk(rng: np.random.Generator, start: np.ndarray, end: np.ndarray, steps: int) -> np.ndarray:
    """[T, 4]: per-step velocities summing exactly to end − start (a constant drift plus zero-sum noise) and two
    gripper commands that switch at most once."""
    noise = rng.normal(scale=0.3, size=(steps, 2))
    velocity = (end - start)[None] / steps + noise - noise.mean(axis=0)
    gripper = np.zeros((steps, 2))
    for dim in range(2):
        switch, value = rng.integers(0, steps + 1), rng.integers(0, 2)
        gripper[:, dim] = np.where(np.arange(steps) < switch, 1 - value, value)
    return np.concatenate([velocity / ACTION_SCALE, gripper], axis=1).astype(np.float32)


def make_sprite_data(seed: int, num_samples: int, *, image_size: int = 32, chunk: int = 16,
                     human_fraction: float = 0.25, embodiment2_fraction: float = 0.25) -> SpriteData:
    """`num_samples` scenes (module docstring) drawn from numpy's generator seeded by `seed`.

    Returns SpriteData with condition/target [N, image_size, image_size, 3] and actions [N, chunk, 4].
    """
    check_int("seed", seed, minimum=0)
    check_int("num_samples", num_samples)
    check_int("image_size", image_size, minimum=SPRITE + 4)
    check_int("chunk", chunk)
    check_interval("human_fraction", human_fraction, 0.0, 1.0)
    check_interval("embodiment2_fraction", embodiment2_fraction, 0.0, 1.0)
    if human_fraction + embodiment2_fraction > 1.0:
        raise ValueError(f"human_fraction + embodiment2_fraction must be <= 1, got {human_fraction} + "
                         f"{embodiment2_fraction}")
    rng = np.random.default_rng(seed)
    kind = rng.choice(3, size=num_samples, p=[1 - human_fraction - embodiment2_fraction, embodiment2_fraction,
                                               human_fraction]).astype(np.int32)
    condition = np.empty((num_samples, image_size, image_size, 3), np.float32)
    target, actions = np.empty_like(condition), np.zeros((num_samples, chunk, ACTION_DIM), np.float32)
    high = image_size - SPRITE
    for i in range(num_samples):
        background = _scene(rng, image_size)
        start, end = rng.integers(0, high + 1, size=2).astype(float), rng.integers(0, high + 1, size=2).astype(float)
        chunk_actions = _chunk(rng, start, end, chunk)
        condition[i] = _robot_frame(background, start, bool(rng.integers(0, 2)))
        target[i] = _robot_frame(background, start + chunk_actions[:, :2].sum(axis=0) * ACTION_SCALE,
                                 bool(chunk_actions[-1, 2]))
        if kind[i] == EMBODIMENT2:
            actions[i] = 0.5 * chunk_actions[:, [1, 0, 3, 2]]
        elif kind[i] == ROBOT:
            actions[i] = chunk_actions
    return SpriteData(np.clip(condition, 0, 1), np.clip(target, 0, 1), actions,
                      (kind != HUMAN).astype(np.float32), kind)
