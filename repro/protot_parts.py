"""Pieces of the ProtoT reproduction (repro/protot.py): parameter-matched baselines, the prototype
read-outs (usage, top bytes per prototype), prototype edits by strength, and the figures.

ProtoT (arXiv 2602.11852) is a RECONSTRUCTION in this zoo (zoo/mixers/protot.py): prototypes are learned
vectors that tokens write to (a [B, T, H, K₀], a softmax over the K₀ base prototypes) and read from
(b [B, T, H, K] over the K = K₀·S channels, prototype j at S time scales).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from matplotlib.figure import Figure

from icml26zoo.diagnostics import protot_hooks as hooks
from icml26zoo.diagnostics.capture import capture_forward
from icml26zoo.models import generate
from icml26zoo.models.config import ModelConfig
from icml26zoo.repro.common import parameter_count
from icml26zoo.train.data.bytes_codec import decode
from icml26zoo.validation import check_choice, check_int, check_interval

__all__ = ["EDIT_KINDS", "LABELS", "PRESETS", "WHITESPACE", "class_share", "concept_prototype", "divergence",
           "edit_effects", "layer_weights", "match_mlp_dims", "prompt_usage", "prototype_edit", "prototype_rows",
           "sampled_generations", "show_bytes", "top_writers", "usage_figure"]

# The compared mixers and the tiny preset each starts from (2 layers, d_model 64, byte corpus).
PRESETS = {"protot": "protot_tiny", "attention": "llama_tiny", "mamba2": "mamba2_tiny",
           "gated_deltanet": "gated_deltanet_tiny"}
LABELS = {"protot": "ProtoT", "attention": "Llama (attention)", "mamba2": "Mamba2", "gated_deltanet": "GDN"}
EDIT_KINDS = ("suppress", "amplify")
# The byte class of the concept edit: space, newline and tab.
WHITESPACE = b" \n\t"



def match_mlp_dims(configs: Mapping[str, ModelConfig], reference: str) -> dict[str, ModelConfig]:
    """Each config with the SwiGLU width whose total parameter count is closest to `reference`'s.

    The count is affine in mlp_dim (3·D·mlp_dim per layer), so two abstract counts give the slope. The
    reference keeps its own width. A config that cannot reach the target with mlp_dim >= 1 raises ValueError.
    """
    target = parameter_count(configs[reference])
    matched = {}
    for name, cfg in configs.items():
        if name == reference:
            matched[name] = cfg
            continue
        low, high = (parameter_count(dataclasses.replace(cfg, mlp_dim=m)) for m in (64, 128))
        width = round(64 + (target - low) * 64 / (high - low))
        if width < 1:
            raise ValueError(f"mixer {name!r} has more parameters without its MLP than {reference!r} in total "
                             f"({target:,}); widen {reference!r} or shrink {name!r}")
        matched[name] = dataclasses.replace(cfg, mlp_dim=width)
    return matched


def show_bytes(tokens: bytes | Sequence[int]) -> str:
    """Bytes or byte tokens as readable text for a markdown cell: space as ␣, newline as ⏎, tab as ⇥, '|'
    escaped, backquotes as quotes (so the text fits in a table's code span)."""
    data = np.frombuffer(tokens, np.uint8) if isinstance(tokens, bytes) else np.asarray(tokens, np.int64)
    text = decode(data)
    return text.replace(" ", "␣").replace("\n", "⏎").replace("\t", "⇥").replace("|", "\\|").replace("`", "'")


def layer_weights(model: nnx.Module, tokens: jax.Array, segment_ids: jax.Array) -> list[tuple[jax.Array, jax.Array]]:
    """Per layer, the write and read weights (a [B, T, H, K₀], b [B, T, H, K]) for tokens [B, T], under one
    jit: the mixers' inputs of one forward pass (`protot_hooks.mixer_inputs` for every layer at once) through
    `protot_hooks.prototype_assignments`."""
    return _layer_weights(hooks.edit_prototypes(model, {}), tokens, segment_ids)


@nnx.jit
def _layer_weights(model: nnx.Module, tokens: jax.Array, segment_ids: jax.Array) -> list:
    inputs = capture_forward(model, tokens, segment_ids=segment_ids, materialize_attention=False)["mixer_in"]
    return [hooks.prototype_assignments(layer.mixer, x, segment_ids=segment_ids)
            for layer, x in zip(model.layers, inputs, strict=True)]


def top_writers(write_weights: np.ndarray, real: np.ndarray, k: int) -> hooks.TopTokens:
    """Like `protot_hooks.top_tokens_per_prototype` from precomputed write weights a [B, T, H, K₀]: per
    (head, prototype) the k real positions (real [B, T] bool) with the largest a, strongest first; the
    token_ids field is left for the caller (the positions index the tokens). Ties go to the earlier position."""
    length = write_weights.shape[1]
    flat = np.moveaxis(np.asarray(write_weights), (0, 1), (2, 3)).reshape(write_weights.shape[2:] + (-1,))
    flat = np.where(real.reshape(-1), flat, -np.inf)
    index = np.argsort(-flat, axis=-1, kind="stable")[..., :k]
    weights = np.take_along_axis(flat, index, axis=-1)
    return hooks.TopTokens(np.zeros_like(index), index // length, index % length, weights)


def prototype_rows(model: nnx.Module, tokens: jax.Array, segment_ids: jax.Array, *, top_k: int) -> list[dict]:
    """One row per (layer, base prototype) of head 0 for tokens [B, T] (segment id 0 = padding, ignored).

    usage: the mean write weight a_{·,j} over the real tokens (sums to 1 over a layer's prototypes);
    argmax_share: the fraction of real tokens whose largest write weight is j (also sums to 1);
    read_share: the mean read weight b summed over j's S channels (sums to 1 unless an edit is active);
    top_bytes: the distinct bytes among the `top_k` strongest writers, with their counts, strongest first;
    whitespace_share: the share of those `top_k` writers that are space, newline or tab;
    context: the strongest writer with up to 8 bytes before it, the writer in [brackets].
    """
    tokens_np, real = np.asarray(tokens), np.asarray(segment_ids) != 0
    check_int("top_k (at most the real tokens)", top_k, maximum=int(real.sum()))
    rows = []
    for layer, (write, read) in enumerate(layer_weights(model, tokens, segment_ids)):
        usage, _ = hooks.prototype_usage(write, segment_ids=segment_ids)
        head = np.asarray(write[:, :, 0])
        winners = head.argmax(-1)[real]
        num_prototypes = head.shape[-1]
        read_share = np.asarray(read[:, :, 0])[real].reshape(real.sum(), num_prototypes, -1).sum(-1)
        top = top_writers(np.asarray(write), real, top_k)
        for j in range(num_prototypes):
            rows_j, positions_j = top.rows[0, j], top.positions[0, j]
            rows.append({
                "layer": layer, "prototype": j, "usage": float(usage[0, j]),
                "argmax_share": float(np.mean(winners == j)), "read_share": float(read_share[:, j].mean()),
                "top_bytes": _distinct_bytes(tokens_np[rows_j, positions_j]),
                "whitespace_share": class_share(tokens_np[rows_j, positions_j], WHITESPACE),
                "context": _context(tokens_np, int(rows_j[0]), int(positions_j[0])),
            })
    return rows


def _distinct_bytes(token_ids: np.ndarray) -> str:
    values, first, counts = np.unique(token_ids, return_index=True, return_counts=True)
    order = np.argsort(first)
    return " ".join(f"`{show_bytes([int(values[i])])}`×{int(counts[i])}" for i in order)


def _context(tokens: np.ndarray, row: int, position: int) -> str:
    before = tokens[row, max(0, position - 8) : position]
    return f"`{show_bytes(before)}[{show_bytes([tokens[row, position]])}]`"


def prototype_edit(mixer: nnx.Module, prototype: int, kind: str, strength: float) -> hooks.PrototypeEdit:
    """The edit of base prototype j of one ProtoT layer at `strength` (0 = no change, in every head).

    "suppress": its S read weights × (1 − strength), strength in [0, 1] (1 = the layer no longer reads j);
    "amplify": its S read weights × (1 + strength), strength >= 0.
    """
    check_choice("kind", kind, EDIT_KINDS)
    check_interval(f"strength of a {kind!r} edit", strength, 0, 1.0 if kind == "suppress" else np.inf)
    factor = 1.0 - strength if kind == "suppress" else 1.0 + strength
    channels = hooks.channels_of_prototype(mixer, prototype)
    return hooks.PrototypeEdit(scale_reads=tuple((k, float(factor)) for k in channels))


def prompt_usage(model: nnx.Module, prompt: str, layer: int) -> np.ndarray:
    """The mean write weight of each base prototype of `layer` over the prompt's bytes (and heads): [K₀].

    Its argmax is the prototype this prompt writes to most, the edit target chosen by the prompt itself.
    """
    tokens = _prompt_tokens(prompt)
    write, _ = layer_weights(model, tokens, jnp.ones_like(tokens))[layer]
    return np.asarray(write).mean(axis=(0, 1, 2))


def class_share(tokens: np.ndarray, byte_class: bytes) -> float:
    """The share of byte tokens (any shape, non-empty) that belong to `byte_class`."""
    tokens = np.asarray(tokens)
    return float(np.isin(tokens, np.frombuffer(byte_class, np.uint8)).mean())


def concept_prototype(rows: Sequence[Mapping], layer: int) -> int:
    """The base prototype of `layer` whose strongest writers are most often whitespace (rows from
    `prototype_rows`, key "whitespace_share"); ties go to the more used prototype, then the lower index."""
    mine = [row for row in rows if row["layer"] == layer]
    if not mine:
        raise ValueError(f"layer must be a layer of the prototype rows, got {layer!r}")
    return max(mine, key=lambda row: (row["whitespace_share"], row["usage"], -row["prototype"]))["prototype"]


def edit_effects(model: nnx.Module, prompt: str, edits: Mapping[str, tuple[int, hooks.PrototypeEdit]], *,
                 new_tokens: int, tokens: jax.Array, segment_ids: jax.Array, byte_class: bytes = WHITESPACE,
                 generations: Mapping[str, np.ndarray] | None = None,
                 ) -> tuple[dict[str, str], dict[str, dict[str, float]]]:
    """Greedy continuations of `prompt` by the unedited model ("none") and by one copy per edit, and how much
    each edit moves the next-byte distribution on held-out tokens [B, T] (segment id 0 = padding, ignored).

    edits: {name: (layer, PrototypeEdit)}. Returns ({"none" | name: the `new_tokens` generated bytes,
    decoded}, {"none" | name: effect}). Every effect holds class_mass (the mean predicted probability of a
    byte in `byte_class` over the real held-out positions) and generation_share (the share of generated bytes
    in `byte_class`); an edit's also holds mean_tv (mean total-variation distance of its next-byte
    distribution from the unedited model's) and argmax_changed (share of positions whose most likely byte
    changes), both over the real held-out positions, so an edit is measured even when the greedy text does
    not change. `generations` ({"none" | name: token ids}, e.g. from `sampled_generations`) replaces the
    greedy continuations (and their compiled program) when given.
    """
    prompt_tokens = _prompt_tokens(prompt)
    real = np.asarray(segment_ids) != 0
    in_class = np.zeros(model.cfg.vocab_size, bool)
    in_class[np.frombuffer(byte_class, np.uint8)] = True
    variants = {"none": None} | dict(edits)
    texts, probabilities, effects = {}, {}, {}
    for name, edit in variants.items():
        edited = hooks.edit_prototypes(model, {} if edit is None else {edit[0]: edit[1]})
        if generations is None:
            out = np.asarray(generate(edited, prompt_tokens, max_new_tokens=new_tokens, key=jax.random.key(0),
                                      temperature=0.0)[0])
        else:
            out = np.asarray(generations[name])
        texts[name] = decode(out)
        logits = _segmented_logits(edited, tokens, segment_ids)
        probabilities[name] = np.asarray(jax.nn.softmax(logits.astype(jnp.float32), axis=-1))[real]
        effects[name] = {"class_mass": float(probabilities[name][:, in_class].sum(-1).mean()),
                         "generation_share": class_share(out, byte_class)}
    base = probabilities["none"]
    for name, probs in probabilities.items():
        if name != "none":
            effects[name] |= {"mean_tv": float(0.5 * np.abs(probs - base).sum(-1).mean()),
                              "argmax_changed": float((probs.argmax(-1) != base.argmax(-1)).mean())}
    return texts, effects


def sampled_generations(model: nnx.Module, prompts: jax.Array, edits: Mapping[str, tuple[int, hooks.PrototypeEdit]],
                        *, new_tokens: int, keys: Sequence[int], temperature: float = 1.0) -> dict[str, np.ndarray]:
    """Sampled continuations of prompts [B, P] by the unedited model ("none") and one copy per edit
    ({name: (layer, PrototypeEdit)}), every variant with the same PRNG keys: {name: tokens [len(keys), B, N]}.

    With one key every variant draws the same noise at every step (`generate` samples by the Gumbel trick),
    so two variants emit the same bytes until their next-byte distributions first differ enough to matter.
    The unedited model runs as an edited copy with identity masks (the same outputs): one compiled program.
    """
    texts = {}
    for name, edit in ({"none": None} | dict(edits)).items():
        edited = hooks.edit_prototypes(model, {} if edit is None else {edit[0]: edit[1]})
        texts[name] = np.stack([np.asarray(generate(edited, prompts, max_new_tokens=new_tokens, key=jax.random.key(k),
                                                    temperature=temperature)) for k in keys])
    return texts


def divergence(base: np.ndarray, other: np.ndarray) -> dict[str, float | None]:
    """How generations other differ from base (token arrays of one shape [..., N]): bytes_changed (share of
    positions that differ), rows_changed (share of generations that differ anywhere) and first_divergence
    (mean index of the first differing byte over the generations that differ; None if none does)."""
    if base.shape != other.shape:
        raise ValueError(f"other must have the shape of base {base.shape}, got {other.shape}")
    differ = np.asarray(base) != np.asarray(other)
    changed = differ.any(-1)
    first = np.argmax(differ, -1)[changed]
    return {"bytes_changed": float(differ.mean()), "rows_changed": float(changed.mean()),
            "first_divergence": float(first.mean()) if changed.any() else None}


@nnx.jit
def _segmented_logits(model: nnx.Module, tokens: jax.Array, segment_ids: jax.Array) -> jax.Array:
    return model(tokens, segment_ids=segment_ids)


def _prompt_tokens(prompt: str) -> jax.Array:
    return jnp.asarray(np.frombuffer(prompt.encode(), np.uint8)[None].astype(np.int32))


def usage_figure(rows: Sequence[Mapping], *, title: str) -> Figure:
    """One panel per layer: the mean write weight of each prototype (bars), the share of tokens it wins
    (dots) and its mean read weight (crosses), prototypes in index order."""
    layers = sorted({row["layer"] for row in rows})
    figure = Figure(figsize=(6.5, 2.2 * len(layers) + 0.6), layout="constrained")
    axes_list = figure.subplots(len(layers), 1, squeeze=False)[:, 0]
    for axes, layer in zip(axes_list, layers, strict=True):
        mine = [row for row in rows if row["layer"] == layer]
        index = [row["prototype"] for row in mine]
        axes.bar(index, [row["usage"] for row in mine], color="tab:blue", alpha=0.7, label="mean write weight")
        axes.plot(index, [row["argmax_share"] for row in mine], "o", color="tab:orange", markersize=4,
                  label="share of tokens (argmax)")
        axes.plot(index, [row["read_share"] for row in mine], "x", color="tab:green", markersize=5,
                  label="mean read weight")
        axes.axhline(1.0 / len(mine), linestyle="--", linewidth=1, color="gray", label="uniform")
        axes.set(ylabel=f"layer {layer}", xticks=index)
        axes.grid(True, alpha=0.3)
    axes_list[0].set_title(title)
    axes_list[-1].set_xlabel("prototype")
    axes_list[0].legend(fontsize=7, ncols=2)
    return figure
