"""The divergence_decoding experiment's benchmark: a generated corpus of "name:attribute" facts.

Each fact is the character string "\\n<name>:<attribute>" with a random five-letter name and an attribute
drawn from `ATTRIBUTES` (sixteen words with distinct first letters), so an attribute can only be known by
memorizing its fact. A fraction of the facts is the forget set, the rest the retain set. Models read
characters (`ALPHABET`, vocabulary `VOCAB_SIZE`). Here: the corpus, training batches in the trainer's format,
teacher-forced scoring of the answers (the attribute and the newline after it, given "\\n<name>:"), greedy
answer accuracy through the decoding loop, and the KL distillation of steered logits into the base model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from icml26zoo.decode.divergence import distillation_loss
from icml26zoo.decode.loop import LogitsProcessor, generate
from icml26zoo.repro.common import spread
from icml26zoo.train.batch_source import batch_from_tokens
from icml26zoo.validation import check_int, check_interval

__all__ = ["ALPHABET", "ATTRIBUTES", "SCORES", "VOCAB_SIZE", "FactCorpus", "FactScore", "answer_accuracy",
           "answer_arrays", "decode_text", "distill", "encode", "fact_batches", "make_corpus", "score_answers",
           "seed_means"]

ALPHABET = "\nabcdefghijklmnopqrstuvwxyz:"
VOCAB_SIZE = 32  # the alphabet padded to a round size; ids >= len(ALPHABET) never occur
ATTRIBUTES = ("amber", "blue", "coral", "dune", "ebony", "fern", "gold", "hazel", "ivory", "jade", "khaki", "lilac",
              "mint", "navy", "olive", "plum")
NAME_LENGTH = 5
PROMPT_LENGTH = NAME_LENGTH + 2  # "\n" + name + ":"
ANSWER_LENGTH = max(len(word) for word in ATTRIBUTES) + 1  # attribute + "\n", padded
_CONSONANTS, _VOWELS = "bcdfghjklmnprstvz", "aeiou"


def encode(text: str) -> np.ndarray:
    """Characters of ALPHABET -> int32 ids [len(text)]."""
    unknown = sorted(set(text) - set(ALPHABET))
    if unknown:
        raise ValueError(f"text must use only the characters {ALPHABET!r}, got {unknown}")
    return np.asarray([ALPHABET.index(c) for c in text], np.int32)


def decode_text(ids: Sequence[int]) -> str:
    """ids -> characters ("?" for ids outside the alphabet)."""
    return "".join(ALPHABET[i] if 0 <= i < len(ALPHABET) else "?" for i in ids)


@dataclasses.dataclass(frozen=True)
class FactCorpus:
    """Facts as (name, attribute) pairs, split into a forget and a retain set."""

    forget: tuple[tuple[str, str], ...]
    retain: tuple[tuple[str, str], ...]

    @property
    def all(self) -> tuple[tuple[str, str], ...]:
        return self.forget + self.retain


def make_corpus(num_facts: int, forget_fraction: float, seed: int) -> FactCorpus:
    """num_facts facts with distinct consonant-vowel names and random attributes; round(forget_fraction ·
    num_facts) of them (at least one, never all) form the forget set."""
    check_int("num_facts", num_facts, minimum=2)
    check_interval("forget_fraction", forget_fraction, 0, 1, closed="neither")
    rng = np.random.default_rng(seed)
    names: list[str] = []
    while len(names) < num_facts:
        letters = [rng.choice(list(_CONSONANTS if i % 2 == 0 else _VOWELS)) for i in range(NAME_LENGTH)]
        name = "".join(letters)
        if name not in names:
            names.append(name)
    facts = tuple((name, str(rng.choice(ATTRIBUTES))) for name in names)
    forget = min(num_facts - 1, max(1, round(forget_fraction * num_facts)))
    return FactCorpus(forget=facts[:forget], retain=facts[forget:])


def _fact_text(fact: tuple[str, str]) -> str:
    return f"\n{fact[0]}:{fact[1]}"


def fact_batches(facts: Sequence[tuple[str, str]], *, batch_size: int, seq_len: int, seed: int,
                 steps: int) -> Iterator[dict[str, np.ndarray]]:
    """`steps` training batches in the trainer's format: each row is facts in a fresh random order, joined
    and cut to seq_len + 1 characters (every target weighted). Deterministic in `seed`, so a resumed run can
    replay the stream."""
    rng = np.random.default_rng(seed)
    texts = [_fact_text(fact) for fact in facts]
    for _ in range(steps):
        rows = []
        for _ in range(batch_size):
            text = ""
            while len(text) < seq_len + 2:
                text += "".join(texts[i] for i in rng.permutation(len(texts)))
            start = int(rng.integers(0, len(text) - seq_len - 1))
            rows.append(encode(text[start : start + seq_len + 1]))
        yield batch_from_tokens(np.stack(rows))


def answer_arrays(facts: Sequence[tuple[str, str]]) -> tuple[np.ndarray, np.ndarray]:
    """tokens [N, PROMPT_LENGTH + ANSWER_LENGTH] ("\\n<name>:<attribute>\\n", padded with "\\n") and the
    answer mask [N, same] (1 on each answer character, as a target: the attribute and the newline after it)."""
    total = PROMPT_LENGTH + ANSWER_LENGTH
    for name, attribute in facts:
        if len(name) != NAME_LENGTH or len(attribute) >= ANSWER_LENGTH:
            raise ValueError(f"facts must pair {NAME_LENGTH}-letter names with attributes of at most "
                             f"{ANSWER_LENGTH - 1} letters, got {(name, attribute)!r}")
    tokens = np.zeros((len(facts), total), np.int32)
    mask = np.zeros((len(facts), total), np.float32)
    for row, fact in enumerate(facts):
        text = _fact_text(fact) + "\n"
        tokens[row, : len(text)] = encode(text)
        mask[row, PROMPT_LENGTH : len(text)] = 1.0
    return tokens, mask


@dataclasses.dataclass(frozen=True)
class FactScore:
    """Teacher-forced likelihood of the answers: mean negative log-likelihood per answer character (nats)
    and the mean probability of the whole answer (attribute and newline)."""

    nll: float
    answer_probability: float


def _check_groups(groups: Sequence[int] | None, count: int) -> tuple[int, ...]:
    groups = (count,) if groups is None else tuple(groups)
    for g in groups:
        check_int("groups[i]", g)
    if sum(groups) != count:
        raise ValueError(f"groups must sum to the number of facts {count}, got {groups}")
    return groups


def score_answers(logits_fn: Callable[[jax.Array], jax.Array], facts: Sequence[tuple[str, str]], *,
                  groups: Sequence[int] | None = None) -> tuple[FactScore, ...]:
    """Scores the facts' answers under `logits_fn` (tokens [N, T] -> next-token logits [N, T, V]), all in one
    call; one `FactScore` per group of consecutive facts (`groups`: their sizes; default one group)."""
    groups = _check_groups(groups, len(facts))
    tokens, mask = answer_arrays(facts)
    logits = logits_fn(jnp.asarray(tokens))[:, :-1]
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    target_log_probs = np.asarray(jnp.take_along_axis(log_probs, jnp.asarray(tokens[:, 1:, None]), axis=-1)[..., 0])
    weights = mask[:, 1:]
    per_answer = np.sum(target_log_probs * weights, axis=-1)  # [N] log p(answer)
    scores, start = [], 0
    for size in groups:
        part = slice(start, start + size)
        scores.append(FactScore(nll=-float(per_answer[part].sum() / weights[part].sum()),
                                answer_probability=float(np.mean(np.exp(per_answer[part])))))
        start += size
    return tuple(scores)


def answer_accuracy(model: nnx.Module, facts: Sequence[tuple[str, str]], *,
                    processor: LogitsProcessor | None = None, groups: Sequence[int] | None = None) -> tuple[float, ...]:
    """Per group of consecutive facts (`groups`, as in `score_answers`): the fraction whose attribute greedy
    decoding (with `processor`, e.g. Divergence Decoding) writes after "\\n<name>:", followed by a newline."""
    groups = _check_groups(groups, len(facts))
    tokens, _ = answer_arrays(facts)
    prompts = jnp.asarray(tokens[:, :PROMPT_LENGTH])
    generated = np.asarray(generate(model, prompts, max_new_tokens=ANSWER_LENGTH, key=jax.random.key(0),
                                    temperature=0.0, processor=processor))
    hits = np.asarray([decode_text(row).startswith(fact[1] + "\n") for row, fact in zip(generated, facts, strict=True)])
    bounds = np.cumsum((0, *groups))
    return tuple(float(hits[a:b].mean()) for a, b in zip(bounds[:-1], bounds[1:], strict=True))


def distill(student: nnx.Module, tokens: jax.Array, mask: jax.Array, teacher_logits: jax.Array, *, steps: int,
            learning_rate: float) -> tuple[nnx.Module, list[float]]:
    """A copy of `student` trained for `steps` full-batch Adam steps on KL(p_teacher ‖ p_student) at the
    positions predicting a masked token. Returns (distilled model, loss per step).

    tokens [N, T] int and mask [N, T] as from `answer_arrays` (1 on answer characters, 0 on the prompt);
    teacher_logits [N, T, V], the frozen teacher's (e.g. the steered) next-token logits on tokens.
    """
    check_int("steps", steps)
    inputs = jnp.asarray(tokens)[:, :-1]
    teacher = jax.lax.stop_gradient(jnp.asarray(teacher_logits)[:, :-1])
    weights = jnp.asarray(mask)[:, 1:]
    graphdef, params = nnx.split(student, nnx.Param)
    optimizer = optax.adam(learning_rate)

    @jax.jit
    def step(params, opt_state):
        def loss_fn(p):
            return distillation_loss(nnx.merge(graphdef, p)(inputs), teacher, weights)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        # optax's bias correction mixes Python floats with its int32 count, which strict promotion rejects.
        with jax.numpy_dtype_promotion("standard"):
            updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    opt_state, losses = optimizer.init(params), []
    for _ in range(steps):
        params, opt_state, loss = step(params, opt_state)
        losses.append(float(loss))
    return nnx.merge(graphdef, params), losses


# The per-seed scores `seed_means` averages (answer probabilities are left out: they span 20 orders of magnitude).
SCORES = ("forget_nll", "retain_nll", "forget_accuracy", "retain_accuracy")


def seed_means(rows: Sequence[dict]) -> list[dict]:
    """One row per (model, forget_aux_data, alpha) of per-seed `rows`, in first-seen order: each of SCORES as its
    mean over the seeds and `<score>_spread` (max - min; None with one seed), and `seeds`, how many."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["model"], row["forget_aux_data"], row["alpha"]), []).append(row)
    means = []
    for (model, data, alpha), members in groups.items():
        mean = {"model": model, "forget_aux_data": data, "alpha": alpha, "seeds": len(members)}
        for score in SCORES:
            values = [float(member[score]) for member in members]
            mean[score], mean[f"{score}_spread"] = float(np.mean(values)), spread(values)
        means.append(mean)
    return means
