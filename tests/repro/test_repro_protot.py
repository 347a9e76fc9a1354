"""The ProtoT reproduction (repro/protot.py): bad inputs, parameter matching, and the prototype read-out
and edits on a tiny random model. The SMOKE run itself runs in the experiment contract
(tests/repro/test_experiments.py) and tests/test_notebooks.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.configs import load_preset
from icml26zoo.diagnostics import protot_hooks as hooks
from icml26zoo.models import build_model
from icml26zoo.models.config import ModelConfig
from icml26zoo.repro import protot
from icml26zoo.repro.common import Budget
from icml26zoo.repro.protot_parts import (
    WHITESPACE,
    class_share,
    concept_prototype,
    divergence,
    edit_effects,
    match_mlp_dims,
    parameter_count,
    prompt_usage,
    prototype_edit,
    prototype_rows,
    sampled_generations,
    show_bytes,
    top_writers,
)

pytestmark = pytest.mark.usefixtures("fast_compile")  # tolerance and range checks only (tests/conftest.py)

TINY = Budget(steps=2, batch_size=2, seq_len=16)


@pytest.fixture(scope="module")
def model():
    cfg = ModelConfig(mixer="protot", vocab_size=64, d_model=32, num_layers=2, num_heads=2, num_kv_heads=1,
                      max_seq_len=64, mixer_options=(("num_prototypes", 5), ("prototype_dim", 8),
                                                     ("scale_exponents", (1, 4, 7))))
    return build_model(cfg, rngs=nnx.Rngs(0))


@pytest.fixture(scope="module")
def tokens():
    ids = jax.random.randint(jax.random.key(1), (2, 12), 0, 64, dtype=jnp.int32)
    segments = jnp.asarray([[1] * 12, [1] * 5 + [2] * 4 + [0] * 3], jnp.int32)
    return ids, segments


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"mixers": ("protot", "fox")}, r"mixers: unknown name 'fox'; expected one of \['protot', 'attention'"),
    ({"mixers": ("attention",)}, r"mixers must include 'protot'"),
    ({"eval_batches": 0}, r"eval_batches must be an integer >= 1, got 0"),
    ({"sample_keys": 0}, r"sample_keys must be an integer >= 1, got 0"),
    ({"top_k": 10_000}, r"top_k must be at most analysis_rows x seq_len = 128, got 10000"),
    ({"edit_layer": 2}, r"edit_layer must be an integer in \[0, 1\], got 2"),
    ({"edit_prototype": -1}, r"edit_prototype must be an integer in \[0, 15\], got -1"),
    ({"amplify": 0.0}, r"amplify .* must be a finite positive number, got 0.0"),
    ({"amplify": float("nan")}, r"amplify .* must be a finite positive number, got nan"),
    ({"prompt": ""}, r"prompt must be a non-empty str"),
    ({"prompt": "x" * 250}, r"prompt must be a non-empty str whose UTF-8 bytes plus new_tokens \(48\) fit 256"),
])
def test_bad_arguments_raise_before_anything_is_written(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        protot.run(tmp_path / "run", budget=TINY, **kwargs)
    assert not (tmp_path / "run").exists()


def test_baselines_are_matched_to_protot_within_3_percent():
    models = {m: load_preset(preset).model for m, preset in protot.PRESETS.items()}
    matched = match_mlp_dims(models, "protot")
    target = parameter_count(models["protot"])
    assert matched["protot"] == models["protot"]
    for mixer in ("attention", "mamba2", "gated_deltanet"):
        assert abs(parameter_count(matched[mixer]) / target - 1) < 0.03, mixer
    # Unmatched, Mamba2's tiny preset is 26% larger than ProtoT's: the matching is doing the work.
    assert parameter_count(models["mamba2"]) / target > 1.2


def test_prototype_rows_have_one_row_per_prototype_and_normalized_shares(model, tokens):
    ids, segments = tokens
    rows = prototype_rows(model, ids, segments, top_k=4)
    assert [(r["layer"], r["prototype"]) for r in rows] == [(layer, j) for layer in range(2) for j in range(5)]
    for layer in range(2):
        mine = [r for r in rows if r["layer"] == layer]
        for key in ("usage", "argmax_share", "read_share"):
            np.testing.assert_allclose(sum(r[key] for r in mine), 1.0, rtol=1e-5, err_msg=key)
        assert all(0 < r["usage"] < 1 for r in mine)
    # The four strongest writers are listed with their counts; counts add up to top_k.
    assert all(sum(int(part.rsplit("×", 1)[1]) for part in r["top_bytes"].split()) == 4 for r in rows)
    with pytest.raises(ValueError, match=r"top_k \(at most the real tokens\) must be an integer in \[1, 21\]"):
        prototype_rows(model, ids, segments, top_k=22)


def test_top_writers_and_prompt_usage_agree_with_the_hook(model, tokens):
    ids, segments = tokens
    top = hooks.top_tokens_per_prototype(model, ids, 1, 6, segment_ids=segments)
    mixer = hooks.layer_mixer(model, 1)
    write, _ = hooks.prototype_assignments(mixer, hooks.mixer_inputs(model, ids, 1, segment_ids=segments))
    mine = top_writers(np.asarray(write), np.asarray(segments) != 0, 6)
    assert mine.rows.shape == (1, 5, 6)  # [H, K₀, k]: one prototype bank
    np.testing.assert_allclose(mine.weights, top.weights, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(ids)[mine.rows, mine.positions], top.token_ids)
    assert not ((mine.rows == 1) & (mine.positions >= 9)).any()  # padding never counts
    # Row 0 is one whole segment, so it is also a prompt: prompt_usage averages its write weights.
    usage = prompt_usage(model, bytes(np.asarray(ids[0]).tolist()).decode(), 1)
    np.testing.assert_allclose(usage, np.asarray(write)[0].mean(axis=(0, 1)), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(usage.sum(), 1.0, rtol=1e-5)


# One jitted forward for every test: the unedited model compiles once, and once more for every edited copy
# (the edits are traced arrays, so all edits share that program).
_forward = nnx.jit(lambda m, t: m(t))


@pytest.mark.parametrize("kind", ["suppress", "amplify"])
def test_an_edit_of_zero_strength_leaves_the_logits_and_a_real_edit_changes_them(model, tokens, kind):
    ids, _ = tokens
    plain = _forward(model, ids)
    mixer = hooks.layer_mixer(model, 1)
    unchanged = _forward(hooks.edit_prototypes(model, {1: prototype_edit(mixer, 2, kind, 0.0)}), ids)
    np.testing.assert_allclose(unchanged, plain, rtol=1e-6, atol=1e-6)
    edited = _forward(hooks.edit_prototypes(model, {1: prototype_edit(mixer, 2, kind, 1.0)}), ids)
    assert float(jnp.abs(edited - plain).max()) > 1e-4
    # The edit is causal-safe and local to the edited layer's reads of prototype 2's three channels.
    assert prototype_edit(mixer, 2, kind, 1.0).scale_reads == tuple((k, 0.0 if kind == "suppress" else 2.0)
                                                                    for k in (6, 7, 8))


def test_bad_edits_raise(model):
    mixer = hooks.layer_mixer(model, 0)
    with pytest.raises(ValueError, match=r"strength of a 'suppress' edit must be a number in \[0, 1\], got 1.5"):
        prototype_edit(mixer, 0, "suppress", 1.5)
    with pytest.raises(ValueError, match=r"strength of a 'amplify' edit must be a number in \[0, inf\], got -1"):
        prototype_edit(mixer, 0, "amplify", -1)
    with pytest.raises(ValueError, match=r"kind must be one of \['suppress', 'amplify'\], got 'boost'"):
        prototype_edit(mixer, 0, "boost", 1.0)
    with pytest.raises(ValueError, match=r"prototype must be an integer in \[0, 4\], got 5"):
        prototype_edit(mixer, 5, "amplify", 1.0)


def test_show_bytes_makes_whitespace_visible_and_escapes_table_pipes():
    assert show_bytes(b"a b\n\t|`") == "a␣b⏎⇥\\|'"
    assert show_bytes([104, 105]) == "hi"


def test_edit_effects_agree_with_the_logits_of_the_edited_model(model, tokens):
    ids, _ = tokens
    # Padding only at the end of row 1: at the real positions the logits equal the unsegmented forward's.
    segments = jnp.asarray([[1] * 12, [1] * 9 + [0] * 3], jnp.int32)
    real = np.asarray(segments) != 0
    # The edit of the logits test above (its forward is compiled already): prototype 2's reads silenced.
    edit = prototype_edit(hooks.layer_mixer(model, 1), 2, "suppress", 1.0)
    # The prompt's bytes and the class stay below the tiny model's vocabulary of 64.
    texts, effects = edit_effects(model, "!#$%", {"suppress": (1, edit)}, new_tokens=3, tokens=ids,
                                  segment_ids=segments, byte_class=b"!#")
    assert set(texts) == {"none", "suppress"} and all(len(text) == 3 for text in texts.values())
    plain = np.asarray(jax.nn.softmax(_forward(model, ids), axis=-1))[real]
    edited = np.asarray(jax.nn.softmax(_forward(hooks.edit_prototypes(model, {1: edit}), ids), axis=-1))[real]
    tv = 0.5 * np.abs(edited - plain).sum(-1).mean()
    # A random model's mixer barely reaches the logits (small output init), hence the small TV; the
    # segmented and plain forwards round differently at that scale, hence rtol 1e-2.
    assert tv > 1e-6
    np.testing.assert_allclose(effects["suppress"]["mean_tv"], tv, rtol=1e-2)
    assert effects["suppress"]["argmax_changed"] == np.mean(edited.argmax(-1) != plain.argmax(-1))
    # The class mass is the predicted probability of '!' or '#' over the 21 real positions only.
    for name, probs in (("none", plain), ("suppress", edited)):
        np.testing.assert_allclose(effects[name]["class_mass"], probs[:, [33, 35]].sum(-1).mean(), rtol=1e-5)
        generated = texts[name].encode()
        assert effects[name]["generation_share"] == sum(b in b"!#" for b in generated) / len(generated)


def test_concept_prototype_takes_the_most_whitespace_writers_then_the_most_used():
    rows = [{"layer": 0, "prototype": 0, "whitespace_share": 1.0, "usage": 0.9},
            {"layer": 1, "prototype": 0, "whitespace_share": 0.5, "usage": 0.5},
            {"layer": 1, "prototype": 1, "whitespace_share": 0.75, "usage": 0.1},
            {"layer": 1, "prototype": 2, "whitespace_share": 0.75, "usage": 0.3}]
    assert concept_prototype(rows, 1) == 2 and concept_prototype(rows, 0) == 0
    assert class_share(np.asarray([32, 10, 9, 97]), WHITESPACE) == 0.75
    with pytest.raises(ValueError, match=r"layer must be a layer of the prototype rows, got 3"):
        concept_prototype(rows, 3)


def test_an_edit_changes_a_sampled_generation_and_a_no_op_edit_does_not(model):
    # A random model's prototypes all hold about the same average (near-uniform writes) and its logits are
    # near-uniform, so an edit barely moves them. A copy with 30x sharper prototypes, 30x louder mixer outputs
    # and 10x larger logits makes the edit move the next-byte distribution (mean TV ~0.02).
    loud = hooks.edit_prototypes(model, {})
    for layer in loud.layers:
        for variable, factor in ((layer.mixer.out_proj.kernel, 30.0), (layer.mixer.prototypes, 30.0)):
            variable.set_value(factor * variable.get_value())
    loud.final_norm.scale.set_value(10.0 * loud.final_norm.scale.get_value())
    mixer = hooks.layer_mixer(loud, 1)
    edits = {"suppress": (1, prototype_edit(mixer, 2, "suppress", 1.0)),
             "no-op": (1, prototype_edit(mixer, 2, "amplify", 0.0))}
    prompts = jax.random.randint(jax.random.key(3), (8, 5), 0, 64, dtype=jnp.int32)
    texts = sampled_generations(loud, prompts, edits, new_tokens=16, keys=(0, 1, 2, 3))
    assert all(t.shape == (4, 8, 16) for t in texts.values())
    np.testing.assert_array_equal(texts["no-op"], texts["none"])
    changed = divergence(texts["none"], texts["suppress"])
    assert changed["bytes_changed"] > 0 and 0 < changed["rows_changed"] < 1, changed
    # The same keys: both emit the same bytes up to the first divergence.
    differ = texts["none"] != texts["suppress"]
    first = np.argmax(differ, -1)
    for key, row in zip(*np.nonzero(differ.any(-1)), strict=True):
        np.testing.assert_array_equal(texts["none"][key, row, : first[key, row]],
                                      texts["suppress"][key, row, : first[key, row]])
    # Another key draws other bytes: the keys matter.
    assert (texts["none"][0] != texts["none"][1]).any()


def test_divergence_counts_changed_bytes_generations_and_the_first_difference():
    base = np.asarray([[1, 2, 3, 4], [1, 2, 3, 4], [5, 6, 7, 8]])
    other = np.asarray([[1, 2, 9, 9], [1, 2, 3, 4], [0, 6, 7, 8]])
    assert divergence(base, other) == {"bytes_changed": 3 / 12, "rows_changed": 2 / 3, "first_divergence": 1.0}
    assert divergence(base, base) == {"bytes_changed": 0.0, "rows_changed": 0.0, "first_divergence": None}
    with pytest.raises(ValueError, match=r"other must have the shape of base \(3, 4\), got \(2, 4\)"):
        divergence(base, other[:2])


def test_sample_prompts_are_the_prompt_then_held_out_rows_that_start_with_real_text():
    tokens = np.arange(24).reshape(3, 8)
    segments = np.asarray([[1] * 8, [0] + [1] * 7, [1, 1, 1, 2, 2, 0, 0, 0]])
    prompts = protot._sample_prompts("abc", tokens, segments)
    np.testing.assert_array_equal(prompts, [[97, 98, 99], [0, 1, 2], [16, 17, 18]])
    assert prompts.dtype == np.int32
    np.testing.assert_array_equal(protot._sample_prompts("a" * 9, tokens, segments), [[97] * 9])
