"""The model against its options and this machine, checked by the CLI before it trains (`check_fits_model`):
the LoRA rank against the layer widths, the spike monitor's optimizer, and parameter plus optimizer-state memory.
The model and optimizer state are built abstractly (nothing is allocated). Each failure is a `RunError`.
Apart from `train.config_checks` because it builds the model (`train.runs`), which imports that module.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from flax import nnx

from icml26zoo.optim.spike_monitor import find_adam_state
from icml26zoo.train.config import TrainConfig
from icml26zoo.train.errors import RunError
from icml26zoo.train.optim import build_optimizer, lora_trainable, train_only
from icml26zoo.train.runs import build_train_model
from icml26zoo.train.step import split_model

__all__ = ["abstract_state", "check_fits_memory", "check_fits_model", "tree_bytes"]


def check_fits_model(config: TrainConfig) -> None:
    """Builds the model and the optimizer state abstractly (nothing is allocated) and checks the LoRA rank
    against the layer widths, that the spike monitor has Adam moments to read, and that parameters plus optimizer
    state fit this machine's memory (`check_fits_memory`)."""
    params, opt_state = abstract_state(config)
    if config.spike_monitor_every:
        try:
            find_adam_state(opt_state)
        except ValueError:
            raise RunError(f"spike_monitor_every={config.spike_monitor_every} needs an Adam-family optimizer (it reads "
                           f"Adam's moments); optim.name={config.optim.name!r} has none: set spike_monitor_every=0 "
                           "or optim.name='adamw'") from None
    check_fits_memory(config, params, opt_state)


def abstract_state(config: TrainConfig) -> tuple[Any, Any]:
    """(parameters, optimizer state) of the run as trees of `jax.ShapeDtypeStruct`; a model option the model
    rejects (e.g. a LoRA rank above a layer's width) is a RunError."""
    try:
        model = nnx.eval_shape(lambda: build_train_model(config))
    except ValueError as error:
        raise RunError(str(error)) from None
    params = split_model(model)[1]  # model variables (prototype banks, statistics) are small: not counted

    def init(params: Any) -> Any:
        optimizer = build_optimizer(config.optim, config.num_steps)
        return (train_only(optimizer, lora_trainable) if config.lora_rank else optimizer).init(params)

    return params, jax.eval_shape(init, params)


def tree_bytes(tree: Any) -> int:
    """Bytes of the arrays (or `jax.ShapeDtypeStruct`s) of `tree`."""
    # dtype.itemsize, not np.dtype(...): a PRNG key leaf (e.g. DP-SGD's noise key) has a JAX-only dtype.
    return sum(int(np.prod(leaf.shape)) * leaf.dtype.itemsize for leaf in jax.tree.leaves(tree))


def check_fits_memory(config: TrainConfig, params: Any, opt_state: Any) -> None:
    """RunError with the estimate when one device's share of the parameters and optimizer state (sharded over
    mesh_fsdp, replicated over the data axis) exceeds its memory; on the CPU the local devices share the host's
    available memory. Activations are not counted: the estimate is a floor, and refusing it only stops a run
    that could never start (a huge vocabulary would otherwise hang allocating)."""
    per_device = (tree_bytes(params) + tree_bytes(opt_state)) / config.mesh_fsdp
    devices = jax.local_devices()
    if devices[0].platform == "cpu":
        needed, available, where = per_device * len(devices), _host_available_bytes(), "host memory available"
    else:
        limits = [(device.memory_stats() or {}).get("bytes_limit") for device in devices]
        if None in limits:
            return  # The backend does not report its memory: nothing to compare against.
        needed, available, where = per_device, min(limits), f"memory of one {devices[0].device_kind}"
    if available is not None and needed > available:
        count = sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(params))
        raise RunError(f"the model does not fit: its {count:,} parameters and their optimizer state need about "
                       f"{_gib(needed)} GiB, more than the {_gib(available)} GiB {where}; lower model.vocab_size, "
                       "model.d_model or model.num_layers, or shard it with mesh_fsdp")


def _host_available_bytes() -> int | None:
    """MemAvailable of /proc/meminfo (Linux), else None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _gib(size: float) -> str:
    return f"{size / 2**30:,.1f}"
