"""Pieces of the MDN reproduction (`icml26zoo.repro.mdn`): cell configs, gate capture and the stability figure.

The stability check reads the gates an MDN layer actually produces: the model's own blocks sow what each
mixer receives (`zoo.diagnostics.capture.capture_forward`), the layer's public `gates(x)` turns that into
(log α, log μ, β, η), and `transition_spectral_radius` gives the radius of the 2x2 input-free transition
along k̂ (the design notes §1.1 and invariant 7) at every token, head and layer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from flax import nnx
from matplotlib.figure import Figure

from icml26zoo.configs import load_preset
from icml26zoo.diagnostics.capture import capture_forward, unrolled
from icml26zoo.mixers.mdn import transition_spectral_radius
from icml26zoo.models import build_model
from icml26zoo.train.config import TrainConfig, apply_overrides
from icml26zoo.train.data import mqar

# Every preset here has vocabulary 64: padding + keys + values must fit (1 + 2K <= 64).
MAX_KEYS = 31


def with_mixer_options(config: TrainConfig, implementation: str | None) -> TrainConfig:
    """`config` with the mixer option implementation=`implementation` added (None keeps the op's default)."""
    if implementation is None:
        return config
    options = tuple((k, v) for k, v in config.model.mixer_options if k != "implementation")
    model = dataclasses.replace(config.model, mixer_options=(*options, ("implementation", implementation)))
    return dataclasses.replace(config, model=model)


def mqar_config(mixer: str, *, pairs: int, num_keys: int, data_dir: str, implementation: str | None) -> TrainConfig:
    """The `<mixer>_mqar` preset at `pairs` key-value pairs over `num_keys` keys and as many values."""
    config = apply_overrides(load_preset(f"{mixer}_mqar"), [
        f"data.data_dir={data_dir}", f"data.mqar_num_keys={num_keys}", f"data.mqar_num_values={num_keys}",
        f"data.mqar_num_pairs={pairs}",
    ])
    return with_mixer_options(config, implementation)


def byte_config(mixer: str, *, data_dir: str, implementation: str | None) -> TrainConfig:
    """The `<mixer>_tiny` preset: the same model as a byte LM on the built-in `pystdlib` corpus."""
    config = apply_overrides(load_preset(f"{mixer}_tiny"), [f"data.data_dir={data_dir}"])
    return with_mixer_options(config, implementation)



def fresh_model(config: TrainConfig, seed: int) -> nnx.Module:
    """The model of `config`, freshly initialised from `seed` (no training), in one compiled call."""
    return nnx.jit(lambda: build_model(config.model, rngs=nnx.Rngs(seed)))()


def mqar_tokens(num_keys: int, pairs: int, rows: int, seed: int) -> jnp.ndarray:
    """[rows, 4·pairs] int32 MQAR examples, drawn independently of the training and eval splits."""
    return jnp.asarray(mqar.generate(num_keys, num_keys, pairs, rows, seed))


def gate_radii(model: nnx.Module, tokens: jnp.ndarray) -> np.ndarray:
    """Spectral radius of every MDN layer's 2x2 transition at every token: tokens [B, T] -> [L, B, T, H]."""
    return np.asarray(_gate_radii(model, tokens))


@nnx.jit
def _gate_radii(model: nnx.Module, tokens: jnp.ndarray) -> jnp.ndarray:
    """`gate_radii` as one compiled call (eagerly, the capture would compile every small op on its own)."""
    captured = capture_forward(model, tokens, materialize_attention=False)
    layers = unrolled(model).layers
    radii = [transition_spectral_radius(**layer.mixer.gates(captured["mixer_in"][i])) for i, layer in enumerate(layers)]
    return jnp.stack(radii)


def stability_figure(radii: dict[str, np.ndarray]) -> Figure:
    """Histogram of the spectral radii per model (label -> any-shaped array), with the bound 1 marked."""
    figure = Figure(figsize=(6.5, 4.2), layout="constrained")
    axes = figure.add_subplot()
    values = np.concatenate([r.ravel() for r in radii.values()])
    bins = np.linspace(min(0.0, float(values.min())), max(1.02, float(values.max()) + 0.01), 60)
    for label, r in radii.items():
        axes.hist(r.ravel(), bins=bins, alpha=0.55, label=f"{label} (max {float(r.max()):.4f}, n={r.size:,})")
    axes.axvline(1.0, linestyle="--", color="black", linewidth=1, label="stability bound 1")
    axes.set(xlabel="spectral radius of the 2x2 transition along k̂", ylabel="tokens x heads x layers",
             title="MDN gate stability: radius < 1 at every gate value")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    return figure


def mean(values: Sequence[float]) -> float | None:
    """The mean of the finite values, None when there are none (a diverged or missing cell)."""
    finite = [float(v) for v in values if v is not None and np.isfinite(v)]
    return float(np.mean(finite)) if finite else None
