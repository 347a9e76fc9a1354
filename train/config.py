"""Typed, frozen run configs with per-field comments and validation, plus `key=value` overrides.

A preset is a module of `icml26zoo.configs` or a Python file with `get_config() -> TrainConfig`;
`icml26zoo.configs.load_preset` takes a preset name (`llama_tiny`) or a file path. Overrides use dotted paths
into the nested dataclasses (`model.num_layers=2`, `optim.learning_rate=1e-3`, `data.name=mqar`); values are
parsed by the field's declared type, and a bad value raises ValueError naming the field and what is allowed.
An optional nested config (`model.moe: MoEConfig | None`) is switched with `model.moe=default` (its defaults)
or `model.moe=none`; its fields are then set by path (`model.moe.num_experts=8`), and setting a field of one
that is None is an error naming the field. `check_config` looks up every name a config refers to (model, mixer
and its options, optimizer and its options, objective, dataset) before anything is built.
`TrainConfig.to_json` / `TrainConfig.from_json` round-trip a config exactly (the run's `config.json`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import types
import typing
from typing import Any

import jax
from flax import nnx

from icml26zoo.layers.options import build_options
from icml26zoo.models.config import ModelConfig
from icml26zoo.registry import MIXERS, MODELS, OBJECTIVES, OPTIMIZERS
from icml26zoo.train.datasets import check_dataset_name, dataset_for
from icml26zoo.train.errors import RunError
from icml26zoo.validation import (
    check_int,
    check_non_negative,
    check_pairs,
    check_positive,
    check_unit_interval,
    did_you_mean,
)

__all__ = [
    "MAX_SEED",
    "DataConfig",
    "OptimConfig",
    "TrainConfig",
    "apply_overrides",
    "check_config",
    "check_finite_floats",
    "check_lora",
    "check_names",
    "check_two_gradient_rules",
    "objective_options",
    "parse_value",
]


# The largest `seed`: 2**32 - 1 (a uint32).
MAX_SEED = 2**32 - 1


def check_finite_floats(prefix: str, config: Any) -> None:
    """Raises ValueError naming the field when a float field of dataclass `config` (or a float inside a
    tuple field, such as an option value) is infinite or NaN. `prefix` is the config's dotted path."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        numbers = _floats(value)
        if any(not math.isfinite(number) for number in numbers):
            raise ValueError(f"{prefix + '.' if prefix else ''}{field.name} must be finite, got {value!r}")


def _floats(value: Any) -> list[float]:
    if isinstance(value, float):
        return [value]
    if isinstance(value, tuple):
        return [number for item in value for number in _floats(item)]
    return []


def check_config(config: TrainConfig) -> None:
    """`check_names` and finite model numbers: what `load_preset` and `apply_overrides` check.

    Raises RunError (or ValueError) naming the field.
    """
    check_finite_floats("model", config.model)
    check_names(config)


def check_lora(config: TrainConfig) -> None:
    """lora_rank an integer >= 0, lora_alpha None or > 0, lora_targets non-empty strings, init_from None or a
    non-empty path; ValueError naming the field. The rank against the layer widths is checked when the model
    is built (`train.runs.build_run`)."""
    check_int("lora_rank", config.lora_rank, minimum=0)  # 0: no LoRA
    if config.lora_alpha is not None:  # None: alpha = 2 * lora_rank
        check_positive("lora_alpha", config.lora_alpha)
    targets = config.lora_targets
    if not isinstance(targets, tuple) or not targets or not all(isinstance(t, str) and t for t in targets):
        raise ValueError(f"lora_targets must be a non-empty tuple of layer-name patterns, got {targets!r}")
    if config.init_from is not None and (not isinstance(config.init_from, str) or not config.init_from):
        raise ValueError(f"init_from must be a run directory or None, got {config.init_from!r}")


def check_names(config: TrainConfig) -> None:
    """Raises RunError naming the field and the valid values unless every name `config` uses is registered.

    Checked: model.name, model.mixer and the mixer's options (the mixer is built abstractly, so nothing is
    allocated and no device is touched), optim.name and its options, objective and data.name.
    """
    named = (("model.name", config.model.name, MODELS), ("model.mixer", config.model.mixer, MIXERS),
             ("optim.name", config.optim.name, OPTIMIZERS), ("objective", config.objective, OBJECTIVES))
    for field, value, registry in named:
        if value not in registry:
            raise RunError(f"{field} must be one of {registry.names()}, got {value!r}"
                           f"{did_you_mean(value, registry.names())}")
    check_dataset_name("data.name", config.data.name)
    mixer = MIXERS.get(config.model.mixer)
    try:
        nnx.eval_shape(lambda: mixer(config.model, rngs=nnx.Rngs(0)))
    except ValueError as error:
        raise RunError(_naming("model.mixer_options", error)) from None

    check_two_gradient_rules(config.optim)

    def build() -> tuple[()]:
        # The registered factory with the peak learning rate: it checks the optimizer's own options; the
        # schedule, clipping and accumulation around it take theirs from checked OptimConfig fields.
        OPTIMIZERS.get(config.optim.name)(config.optim.learning_rate, config.optim)
        return ()

    # Under eval_shape: some optimizers compute constants when built, which would start the backend before
    # jax.distributed.initialize (which must come first).
    try:
        jax.eval_shape(build)
    except ValueError as error:
        raise RunError(_naming("optim.options", error)) from None


def check_two_gradient_rules(optim: OptimConfig) -> None:
    """An optimizer that takes two gradients per step (it declares its own update, as SAM does) cannot run under
    gradient accumulation or parameter groups; RunError (a ValueError) naming the field."""
    if OPTIMIZERS.update(optim.name) is None:
        return
    if optim.grad_accum_steps > 1:
        raise RunError(
            f"optim.grad_accum_steps must be 1 for optim.name={optim.name!r}, which takes two gradients per step "
            f"(optax.MultiSteps drops the extra arguments it needs), got {optim.grad_accum_steps}"
        )
    if optim.param_groups:
        raise RunError(f"optim.param_groups needs a single-gradient optimizer; optim.name={optim.name!r} takes "
                         f"two gradients per step, got {optim.param_groups!r}")


def _naming(field: str, error: ValueError) -> str:
    # A component's own message names its option ("unknown fox mixer option 'x'") but not the config field
    # holding it; messages that already start with a config path keep it.
    message = str(error)
    return message if message.startswith(("model.", "optim.")) else f"{field}: {message}"


def objective_options(objective: str, pairs: Any) -> Any:
    """The typed options of registered objective `objective` from (name, value) pairs, or None.

    An objective that takes options declares a frozen dataclass as its attribute `options_class`; its
    options are that class built from `pairs` (defaults for what is not given). ValueError naming
    objective_options for: pairs that are not (name, value) pairs, an unknown name (listing the valid ones),
    an ill-typed or out-of-range value, or any pair given to an objective that declares no options.
    """
    check_pairs("objective_options", pairs)
    options_class = getattr(OBJECTIVES.get(objective), "options_class", None)
    if options_class is None:
        if pairs:
            raise ValueError(f"objective_options: objective {objective!r} takes no options, got {pairs!r}")
        return None
    try:
        return build_options(options_class, pairs, owner=f"{objective} objective")
    except ValueError as error:
        raise ValueError(f"objective_options: {error}") from None


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Which data to train and evaluate on, and how it is packed."""

    # A registered dataset (train.datasets.DATASETS): "pystdlib" (the built-in byte corpus), "mqar"
    # (associative recall), "nucleotide" (synthetic DNA from a known hidden-Markov generator, one byte per
    # base), "topics" (synthetic sequence classification, labelled rows), the controlled tasks set by
    # `task_options` ("dyck", "palindromes", "bfvp": labelled language-membership rows; "function_composition",
    # "sparse_boolean": next-token rows) or "tfds:<name>" for any TFDS dataset the user has prepared under
    # data_dir, read as bytes from `text_feature`.
    name: str = "pystdlib"
    # TFDS data directory; None means $ZOO_DATA_DIR or ~/.cache/zoo/tensorflow_datasets.
    data_dir: str | None = None
    # Split names used for training and evaluation.
    train_split: str = "train"
    eval_split: str = "validation"
    # For tfds:<name> datasets: the string/bytes feature holding the text.
    text_feature: str = "text"
    # Pack several documents into each row (with segment ids) instead of one padded document per row.
    pack: bool = True
    # MQAR: number of distinct keys, distinct values, key-value pairs per example, examples per split.
    mqar_num_keys: int = 64
    mqar_num_values: int = 64
    mqar_num_pairs: int = 8
    mqar_train_examples: int = 20_000
    mqar_eval_examples: int = 1_000
    # Nucleotide: bases per sequence (a row of seq_len targets holds exactly one sequence when this is
    # seq_len + 1) and sequences per split.
    nucleotide_length: int = 257
    nucleotide_train_examples: int = 4096
    nucleotide_eval_examples: int = 128
    # Topics: C classes, K content tokens (C of them signal each class), tokens per example, the fraction of
    # tokens drawn from the row's class (the rest are uniform noise), and examples per split.
    topics_num_classes: int = 4
    topics_num_tokens: int = 32
    topics_length: int = 65
    topics_signal: float = 0.2
    topics_train_examples: int = 4096
    topics_eval_examples: int = 256
    # Options of a synthetic task dataset ("dyck", "palindromes", "bfvp", "function_composition",
    # "sparse_boolean") as (name, value) pairs, e.g. (("length", 32), ("num_types", 2)), checked against the
    # frozen options dataclass the dataset declares (train.data.tasks): an unknown name or an out-of-range
    # value is a ValueError naming the option. Other datasets take none. () = the task's defaults.
    task_options: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        check_finite_floats("data", self)

        check_dataset_name("data.name", self.name)
        check_task_options(self)
        for name in ("mqar_num_keys", "mqar_num_values", "mqar_num_pairs", "mqar_train_examples",
                     "mqar_eval_examples", "nucleotide_train_examples", "nucleotide_eval_examples",
                     "topics_num_tokens", "topics_train_examples", "topics_eval_examples"):
            check_int(f"data.{name}", getattr(self, name))
        check_int("data.nucleotide_length", self.nucleotide_length, minimum=2)
        check_int("data.topics_num_classes", self.topics_num_classes, minimum=2)
        check_int("data.topics_length", self.topics_length, minimum=2)
        check_unit_interval("data.topics_signal", self.topics_signal, closed_right=True)
        if self.topics_num_tokens % self.topics_num_classes:
            raise ValueError(
                f"data.topics_num_tokens must be a positive multiple of data.topics_num_classes "
                f"({self.topics_num_classes}), got {self.topics_num_tokens!r}"
            )


def check_task_options(data: DataConfig) -> None:
    """data.task_options must be (name, value) pairs that the dataset's options dataclass accepts; datasets
    without options take none (ValueError naming data.task_options)."""
    check_pairs("data.task_options", data.task_options)
    dataset = dataset_for(data)
    parse = getattr(dataset, "options", None)
    if parse is not None:
        parse(data)
    elif data.task_options:
        raise ValueError(f"data.task_options: dataset {data.name!r} takes no task options, "
                         f"got {data.task_options!r}")


def check_param_groups(field: str, groups: Any) -> None:
    """`groups` must be a tuple of (pattern, lr_scale, weight_decay): a compiling regular expression, a number
    >= 0 and a number >= 0 (ValueError naming `field`, the entry and what was expected)."""
    if not isinstance(groups, tuple):
        raise ValueError(f"{field} must be a tuple of (pattern, lr_scale, weight_decay) triples, got {groups!r}")
    for index, group in enumerate(groups):
        where = f"{field}[{index}]"
        if not isinstance(group, tuple) or len(group) != 3 or not isinstance(group[0], str) or not group[0]:
            raise ValueError(f"{where} must be a (pattern, lr_scale, weight_decay) triple with a non-empty "
                             f"pattern string, got {group!r}")
        try:
            re.compile(group[0])
        except re.error as error:
            raise ValueError(f"{where}: pattern {group[0]!r} is not a regular expression ({error})") from None
        for name, value in zip(("lr_scale", "weight_decay"), group[1:], strict=True):
            check_non_negative(f"{where}: {name}", value)


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """The optax optimizer: a registered name plus the shared schedule, clipping and accumulation."""

    # Registered optimizer name (zoo.registry.OPTIMIZERS), e.g. "adamw".
    name: str = "adamw"
    # Peak learning rate of the warmup-cosine schedule.
    learning_rate: float = 3e-3
    # Linear warmup steps from 0 to the peak.
    warmup_steps: int = 50
    # Final learning rate as a fraction of the peak (cosine decay end value).
    end_lr_fraction: float = 0.1
    # Decoupled weight decay (not applied to norms, biases and other 1-D parameters).
    weight_decay: float = 0.1
    # Adam moments.
    b1: float = 0.9
    b2: float = 0.95
    eps: float = 1e-8
    # Global-norm gradient clipping; 0 disables it.
    grad_clip_norm: float = 1.0
    # Element-wise gradient clipping to [-v, v] (torch's clip_grad_value_), before the global-norm clip; 0 disables it.
    grad_clip_value: float = 0.0
    # Micro-batches accumulated per update (optax.MultiSteps); 1 disables accumulation.
    grad_accum_steps: int = 1
    # Extra optimizer-specific hyperparameters as (name, value) pairs, e.g. (("damping", 0.1),).
    options: tuple[tuple[str, Any], ...] = ()
    # Parameter groups with their own learning rate and weight decay, as (pattern, lr_scale, weight_decay)
    # triples: a parameter whose "/"-joined path (e.g. "layers/mixer/filter_out/kernel") matches the regular
    # expression `pattern` (re.search; the first matching group wins) is updated at lr_scale x the schedule's
    # learning rate with decoupled weight decay `weight_decay` (still only on matrices); every other parameter
    # keeps the fields above. () = one group. E.g. (("mixer/filter_", 0.5, 0.0),) for Hyena's filters.
    param_groups: tuple[tuple[str, float, float], ...] = ()

    def __post_init__(self) -> None:
        check_finite_floats("optim", self)
        check_positive("optim.learning_rate", self.learning_rate)
        check_int("optim.warmup_steps", self.warmup_steps, minimum=0)
        check_unit_interval("optim.end_lr_fraction", self.end_lr_fraction, closed_right=True)
        check_non_negative("optim.weight_decay", self.weight_decay)
        check_unit_interval("optim.b1", self.b1)
        check_unit_interval("optim.b2", self.b2)
        check_positive("optim.eps", self.eps)
        check_non_negative("optim.grad_clip_norm", self.grad_clip_norm)
        check_non_negative("optim.grad_clip_value", self.grad_clip_value)
        check_int("optim.grad_accum_steps", self.grad_accum_steps)
        check_pairs("optim.options", self.options)
        check_param_groups("optim.param_groups", self.param_groups)

    def option(self, name: str, default: Any = None) -> Any:
        """The value of optimizer option `name`, or `default` when it is not set."""
        return dict(self.options).get(name, default)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """One training run: model, data, optimizer, parallelism, checkpoints and logging."""

    model: ModelConfig = ModelConfig()
    # A factory, not an instance: validating a DataConfig looks the dataset up, which imports this module.
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    optim: OptimConfig = OptimConfig()
    # The registered objective the trainer minimizes (zoo.registry.OBJECTIVES): "lm" (next-token
    # cross-entropy) or "classification" (one label per row; needs a labelled dataset such as "topics").
    objective: str = "lm"
    # Options of the objective as (name, value) pairs, e.g. (("mode", "rl"),), checked against the frozen
    # options dataclass the objective declares (`options_class`, train.config_checks.objective_options): an
    # unknown name or a bad value is a ValueError naming objective_options. Objectives without options take
    # none. () = the objective's defaults.
    objective_options: tuple[tuple[str, Any], ...] = ()
    # Global batch size in rows (sequences) per optimizer micro-step, across all processes.
    batch_size: int = 16
    # Tokens per row.
    seq_len: int = 256
    # Optimizer updates to run (micro-steps = num_steps * optim.grad_accum_steps).
    num_steps: int = 1000
    # Seed for parameters, data order and sampling.
    seed: int = 0
    # Mesh shape: data-parallel and FSDP axis sizes; their product must equal the device count.
    # data=-1 means "all devices not used by fsdp".
    mesh_data: int = -1
    mesh_fsdp: int = 1
    # Log training metrics every this many steps.
    log_every: int = 10
    # Evaluate every this many steps (and at the end); 0 means only at the end.
    eval_every: int = 0
    # Batches of the eval split per evaluation; 0 means the whole split.
    eval_batches: int = 20
    # Save a checkpoint every this many steps (and at the end); 0 disables checkpoints.
    checkpoint_every: int = 500
    # Checkpoints kept on disk.
    keep_checkpoints: int = 3
    # Write TensorBoard event files besides metrics.jsonl.
    tensorboard: bool = True
    # Show a tqdm progress bar.
    progress_bar: bool = True
    # Bytes of generated sample printed at the end of the run (0 disables), with its temperature/top-k.
    sample_length: int = 200
    sample_temperature: float = 0.8
    sample_top_k: int = 40
    # Run the Adam loss-spike monitor (Bai et al., arXiv 2506.04805) every this many steps; 0 disables it. It needs an
    # Adam-family optimizer and costs about one extra forward-backward plus ~10 Hessian-vector products.
    spike_monitor_every: int = 0
    # Initialize jax.distributed (multi-host); None means "when JAX's cluster environment is detected".
    distributed: bool | None = None
    # Fine-tuning: the workdir of another run whose newest checkpoint's parameters initialize the model
    # (same model config; the optimizer state starts fresh). None: a fresh initialization from `seed`.
    init_from: str | None = None
    # LoRA (zoo.lora): rank r of the adapters on the linear layers named by `lora_targets` (fnmatch patterns);
    # 0 trains all parameters. With r > 0 only the adapters train: the optimizer sees only them and the
    # base weights stay bit-identical. `lora_alpha` α scales the branch by α/r; None means α = 2r.
    lora_rank: int = 0
    lora_alpha: float | None = None
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate", "up", "down")

    def __post_init__(self) -> None:
        check_finite_floats("", self)
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES.names()}, got {self.objective!r}"
                             f"{did_you_mean(self.objective, OBJECTIVES.names())}")
        objective_options(self.objective, self.objective_options)
        for name in ("batch_size", "seq_len", "num_steps", "log_every", "keep_checkpoints"):
            check_int(name, getattr(self, name))
        for name in ("eval_every", "eval_batches", "checkpoint_every", "sample_length", "spike_monitor_every"):
            check_int(name, getattr(self, name), minimum=0)
        # The seed keys parameters, sampling (jax.random.key) and the data order (grain, numpy): a uint32
        # fits them all, a larger int overflows one of them deep inside the run.
        check_int("seed", self.seed, minimum=0, maximum=MAX_SEED)
        check_int("sample_top_k", self.sample_top_k, minimum=0)
        check_non_negative("sample_temperature", self.sample_temperature)
        if self.mesh_data != -1:
            check_int("mesh_data", self.mesh_data)
        check_int("mesh_fsdp", self.mesh_fsdp)
        check_lora(self)

    def to_dict(self) -> dict[str, Any]:
        """The config as nested dicts of plain values (`from_dict` rebuilds an equal config)."""
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """The config as indented JSON, as a run writes it to `config.json` (`from_json` reads it back)."""
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        """The config that `to_dict` (or JSON of it) describes: nested configs rebuilt, lists back to tuples.

        A missing field takes its default; an unknown field raises RunError naming it.
        """
        return _build(cls, values, "")

    @classmethod
    def from_json(cls, text: str) -> TrainConfig:
        """`from_dict(json.loads(text))`; `TrainConfig.from_json(config.to_json()) == config` for every config."""
        try:
            values = json.loads(text)
        except json.JSONDecodeError as error:
            raise RunError(f"config JSON is not valid JSON: {error}") from None
        return cls.from_dict(values)


def _build(cls: type, values: Any, prefix: str) -> Any:
    if not isinstance(values, dict):
        raise RunError(f"config {prefix.rstrip('.') or 'root'} must be a JSON object, got {values!r}")
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(values) - set(hints))
    if unknown:
        raise RunError(f"unknown config field {prefix + unknown[0]!r}; {cls.__name__} has {sorted(hints)}")
    kwargs = {}
    for name, value in values.items():
        hint = hints[name]
        nested = _nested_config(hint)
        if nested is not None and not (value is None and nested is not hint):
            kwargs[name] = _build(nested, value, f"{prefix}{name}.")
        elif typing.get_origin(hint) is tuple:
            kwargs[name] = _as_tuples(value)
        else:
            kwargs[name] = value
    return cls(**kwargs)


def _nested_config(hint: Any) -> type | None:
    """The dataclass of a field typed `Config` or `Config | None` (an optional nested config), else None."""
    if dataclasses.is_dataclass(hint):
        return hint
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(args) == 1 and dataclasses.is_dataclass(args[0]):
            return args[0]
    return None


def _as_tuples(value: Any) -> Any:
    # JSON has no tuples: pairs such as mixer_options come back as lists of lists.
    if isinstance(value, list | tuple):
        return tuple(_as_tuples(item) for item in value)
    return value


def apply_overrides(config: Any, overrides: list[str]) -> Any:
    """Applies `key=value` strings with dotted keys, parsing each value by the field's type.

    A TrainConfig result is checked with `check_config`.
    """
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"override must look like key=value, got {item!r}")
        config = _set_path(config, key.split("."), raw, key)
    if isinstance(config, TrainConfig):
        check_config(config)
    return config



def _set_path(config: Any, path: list[str], raw: str, full_key: str) -> Any:
    fields = {f.name: f for f in dataclasses.fields(config)}
    name = path[0]
    if name not in fields:
        raise ValueError(f"unknown config field {full_key!r}; {type(config).__name__} has {sorted(fields)}")
    current = getattr(config, name)
    if len(path) > 1:
        hint = typing.get_type_hints(type(config))[name]
        if current is None and _nested_config(hint) is not None:
            parts = full_key.split(".")
            field = ".".join(parts[:len(parts) - len(path) + 1])
            raise ValueError(f"config field {full_key!r}: {field} is None; set {field}=default first (its "
                             f"defaults), then its fields")
        if not dataclasses.is_dataclass(current):
            raise ValueError(f"config field {full_key!r}: {name!r} is not a nested config")
        return dataclasses.replace(config, **{name: _set_path(current, path[1:], raw, full_key)})
    hint = typing.get_type_hints(type(config))[name]
    return dataclasses.replace(config, **{name: parse_value(raw, hint, full_key)})


def parse_value(raw: str, hint: Any, key: str) -> Any:
    """Parses `raw` as type `hint` (bool, int, float, str, Optional[...], tuple of pairs, or a nested config
    from "default")."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if type(None) in args and raw.lower() in ("none", "null"):
            return None
        last_error = None
        for arg in (a for a in args if a is not type(None)):
            try:
                return parse_value(raw, arg, key)
            except ValueError as error:
                last_error = error
        raise last_error
    if hint is bool:
        if raw.lower() in ("true", "1", "yes"):
            return True
        if raw.lower() in ("false", "0", "no"):
            return False
        raise ValueError(f"config field {key!r} expects a bool (true/false), got {raw!r}")
    if hint in (int, float):
        try:
            value = hint(float(raw)) if hint is int and float(raw).is_integer() else hint(raw)
        except (ValueError, OverflowError):
            raise ValueError(f"config field {key!r} expects {hint.__name__}, got {raw!r}") from None
        if not math.isfinite(value):
            raise ValueError(f"config field {key!r} expects a finite {hint.__name__}, got {raw!r}")
        return value
    if hint is str:
        return raw
    if dataclasses.is_dataclass(hint):
        if raw.lower() == "default":
            return hint()
        raise ValueError(f"config field {key!r} expects default (a {hint.__name__} with its defaults; then set "
                         f"its fields, e.g. {key}.<field>=...) or none, got {raw!r}")
    if origin is tuple:
        import ast

        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            raise ValueError(f"config field {key!r} expects a Python tuple literal, got {raw!r}") from None
        if not isinstance(value, tuple | list):
            raise ValueError(f"config field {key!r} expects a Python tuple literal such as (('name', 1),), "
                             f"got {raw!r}")
        return tuple(tuple(v) if isinstance(v, list) else v for v in value)
    raise ValueError(f"config field {key!r} has a type ({hint}) that cannot be set from the command line")
