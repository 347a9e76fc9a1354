"""The Divergence Decoding reproduction: bad inputs, the fact corpus and its batches, answer scoring against closed
forms, and distillation moving a student to its teacher. The SMOKE experiment runs in the experiment contract
(tests/repro/test_experiments.py) and the notebook test (tests/test_notebooks.py)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.decode import distillation_loss
from icml26zoo.models import ModelConfig, build_model
from icml26zoo.repro import divergence_decoding
from icml26zoo.repro.common import Budget
from icml26zoo.repro.divergence_decoding_parts import (
    ANSWER_LENGTH,
    ATTRIBUTES,
    PROMPT_LENGTH,
    VOCAB_SIZE,
    answer_arrays,
    decode_text,
    distill,
    encode,
    fact_batches,
    make_corpus,
    score_answers,
)
from icml26zoo.train.batch_source import check_batch

TINY = Budget(steps=2, batch_size=2, seq_len=8, seeds=(0,))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_facts": 5}, "num_facts must be an integer >= 10"),
        ({"forget_fraction": 1.0}, r"forget_fraction must be a number in \(0, 1\), got 1.0"),
        ({"alphas": ()}, "alphas must hold at least one"),
        ({"alphas": (1.0, -1.0)}, r"alphas\[i\] must be a finite positive number, got -1.0"),
        ({"alphas": (1.0, 1.0)}, "must not repeat"),
        ({"distill_alpha": math.inf}, "distill_alpha"),
        ({"distill_steps": 0}, "distill_steps must be an integer >= 1"),
        ({"distill_learning_rate": 0.0}, "distill_learning_rate"),
        ({"forget_aux_data": ("retain",)}, "forget_aux_data: unknown name 'retain'"),
        ({"aux_layers": 0}, "aux_layers"),
    ],
)
def test_bad_arguments_raise_naming_the_field(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        divergence_decoding.run(tmp_path / "run", budget=TINY, **kwargs)
    assert not (tmp_path / "run").exists()  # rejected before anything is written


def test_corpus_is_a_deterministic_split_of_distinct_facts():
    corpus = make_corpus(50, 0.1, seed=3)
    assert corpus == make_corpus(50, 0.1, seed=3) and corpus != make_corpus(50, 0.1, seed=4)
    assert len(corpus.forget) == 5 and len(corpus.retain) == 45
    names = [name for name, _ in corpus.all]
    assert len(set(names)) == 50 and all(len(n) == PROMPT_LENGTH - 2 for n in names)
    assert {attribute for _, attribute in corpus.all} <= set(ATTRIBUTES)
    assert decode_text(encode("\nbaku:jade")) == "\nbaku:jade"
    with pytest.raises(ValueError, match=r"text must use only the characters .*\['X'\]"):
        encode("X")


def test_batches_are_in_the_trainers_format_and_only_hold_the_given_facts():
    corpus = make_corpus(20, 0.2, seed=0)
    batches = list(fact_batches(corpus.retain, batch_size=4, seq_len=24, seed=1, steps=3))
    assert len(batches) == 3
    for index, batch in enumerate(batches):
        check_batch(batch, index, rows=4, seq_len=24, vocab_size=VOCAB_SIZE)
        np.testing.assert_array_equal(batch["inputs"][:, 1:], batch["targets"][:, :-1])
    text = "".join(decode_text(row) for batch in batches for row in batch["inputs"])
    assert not any(f"{name}:" in text for name, _ in corpus.forget)
    replay = list(fact_batches(corpus.retain, batch_size=4, seq_len=24, seed=1, steps=3))
    np.testing.assert_array_equal(replay[2]["inputs"], batches[2]["inputs"])


def test_answer_mask_covers_the_attribute_and_its_newline():
    tokens, mask = answer_arrays([("bakus", "jade"), ("tilor", "amber")])
    assert tokens.shape == mask.shape == (2, PROMPT_LENGTH + ANSWER_LENGTH)
    assert decode_text(tokens[0][mask[0] > 0]) == "jade\n" and decode_text(tokens[1][mask[1] > 0]) == "amber\n"
    assert decode_text(tokens[0][:PROMPT_LENGTH]) == "\nbakus:"
    with pytest.raises(ValueError, match="facts must pair 5-letter names"):
        answer_arrays([("baku", "jade")])


def test_scores_follow_closed_forms():
    facts = make_corpus(12, 0.25, seed=0).all
    uniform = score_answers(lambda t: jnp.zeros((*t.shape, VOCAB_SIZE)), facts, groups=(3, 9))
    for score in uniform:
        assert score.nll == pytest.approx(math.log(VOCAB_SIZE), rel=1e-6)
    # A model that puts probability q on the true next token everywhere: nll = -log q, p(answer) = q ** length.
    q = 0.5
    tokens, _ = answer_arrays(facts)

    def oracle(t):
        following = jnp.concatenate([t[:, 1:], t[:, :1]], axis=1)
        rest = math.log((1 - q) / (VOCAB_SIZE - 1))
        return jnp.where(jax.nn.one_hot(following, VOCAB_SIZE) > 0, math.log(q), rest)

    (score,) = score_answers(oracle, facts)
    lengths = np.asarray([len(attribute) + 1 for _, attribute in facts])
    assert score.nll == pytest.approx(-math.log(q), rel=1e-5)
    assert score.answer_probability == pytest.approx(np.mean(q ** lengths), rel=1e-4)
    with pytest.raises(ValueError, match=r"groups must sum to the number of facts 12, got \(3, 3\)"):
        score_answers(oracle, facts, groups=(3, 3))


def test_distillation_moves_the_student_to_the_teacher():
    cfg = ModelConfig(vocab_size=VOCAB_SIZE, d_model=16, num_layers=1, num_heads=2, num_kv_heads=1, max_seq_len=16)
    student, teacher = build_model(cfg, rngs=nnx.Rngs(0)), build_model(cfg, rngs=nnx.Rngs(1))
    tokens, mask = answer_arrays(make_corpus(10, 0.2, seed=0).all)
    forward = jax.jit(lambda model, t: model(t))
    teacher_logits = forward(teacher, jnp.asarray(tokens))
    distilled, losses = distill(student, tokens, mask, teacher_logits, steps=15, learning_rate=1e-2)
    assert len(losses) == 15 and losses[-1] < 0.5 * losses[0]
    # The reported loss is the masked KL of the student before each step.
    before = distillation_loss(forward(student, jnp.asarray(tokens))[:, :-1], teacher_logits[:, :-1],
                               jnp.asarray(mask)[:, 1:])
    assert losses[0] == pytest.approx(float(before), rel=1e-4)
    assert distilled is not student


def test_seed_means_average_each_setting_over_seeds():
    from icml26zoo.repro.divergence_decoding_parts import seed_means

    def row(model, alpha, seed, forget_nll):
        return {"model": model, "forget_aux_data": "all", "alpha": alpha, "seed": seed, "forget_nll": forget_nll,
                "retain_nll": 0.5, "forget_accuracy": 1.0 - seed / 2, "retain_accuracy": 1.0}

    rows = [row("base", 0.0, 0, 0.1), row("divergence decoding", 1.0, 0, 1.0),
            row("base", 0.0, 1, 0.3), row("divergence decoding", 1.0, 1, 2.0)]
    base, steered = seed_means(rows)
    assert (base["model"], base["seeds"], steered["alpha"]) == ("base", 2, 1.0)
    assert base["forget_nll"] == pytest.approx(0.2) and base["forget_nll_spread"] == pytest.approx(0.2)
    assert steered["forget_accuracy"] == 0.75 and steered["retain_nll_spread"] == 0.0
    assert seed_means(rows[:2])[0]["forget_nll_spread"] is None
