"""The EDEN comparison: the synthetic nucleotide generator and dataset, its motif labels, the matched presets."""

import itertools
import pathlib

import numpy as np
import pytest
from flax import nnx

from icml26zoo.configs import load_preset
from icml26zoo.models import build_model, count_params
from icml26zoo.train import data as zoo_data
from icml26zoo.train.config import DataConfig
from icml26zoo.train.data import nucleotide, nucleotide_hmm
from icml26zoo.train.presets import EDEN_ARCHS, EDEN_SHAPES, eden_lm, eden_model

REPO = pathlib.Path(__file__).resolve().parents[2]
SMALL = dict(length=65, train_examples=48, eval_examples=16)


@pytest.fixture(scope="module")
def spec():
    return nucleotide_hmm.make_spec(0)


@pytest.fixture(scope="module")
def draws(spec):
    return nucleotide_hmm.sample(spec, 512, 256, np.random.SeedSequence([7]))


def test_chain_is_a_stationary_hmm(spec):
    chain = nucleotide_hmm.build_chain(spec)
    k, m, length = spec.num_backgrounds, spec.num_motifs, spec.motif_length
    assert chain.transitions.shape == (k * (m + 1) + k * 2 * m * length,) * 2
    np.testing.assert_allclose(chain.transitions.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(chain.emissions.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(chain.start @ chain.transitions, chain.start, atol=1e-12)
    assert chain.start.min() > 0 and chain.start.sum() == pytest.approx(1.0)


def test_motifs_are_seeded_distinct_and_not_palindromes():
    first, again, other = nucleotide_hmm.make_spec(0), nucleotide_hmm.make_spec(0), nucleotide_hmm.make_spec(1)
    assert first == again and first.motifs != other.motifs
    variants = [tuple(v) for v in first.variants]
    assert len(set(variants)) == 2 * first.num_motifs
    forward = first.variants[: first.num_motifs]
    np.testing.assert_array_equal(first.variants[first.num_motifs :], nucleotide_hmm.reverse_complement(forward))
    for bad, message in (({"motifs": ()}, "motifs must be"), ({"motifs": ((0, 4),)}, "motifs must be"),
                         ({"motifs": ((0,),), "compositions": ((0.5, 0.5, 0.5, 0.0),)}, "compositions must be"),
                         ({"motifs": ((0,),), "motif_rate": 1.0}, r"motif_rate must lie in \[0, 1\)")):
        with pytest.raises(ValueError, match=message):
            nucleotide_hmm.HmmSpec(**bad)


def test_forward_algorithm_matches_a_sum_over_every_state_path():
    spec = nucleotide_hmm.HmmSpec(compositions=((0.7, 0.1, 0.1, 0.1), (0.1, 0.2, 0.3, 0.4)), stay=0.8,
                                  motif_rate=0.3, mutation=0.1, motifs=((0, 2),))
    chain = nucleotide_hmm.build_chain(spec)
    length, size = 4, chain.transitions.shape[0]
    sequences = np.array(list(itertools.product(range(4), repeat=length)))
    probability = np.zeros(len(sequences))
    for path in itertools.product(range(size), repeat=length):
        weight = chain.start[path[0]] * np.prod([chain.transitions[a, b] for a, b in itertools.pairwise(path)])
        if weight:
            probability += weight * np.prod(chain.emissions[np.array(path)[:, None], sequences.T], axis=0)
    assert probability.sum() == pytest.approx(1.0)
    first = (chain.start @ chain.emissions)[sequences[:, 0]]
    bits = nucleotide_hmm.conditional_bits(spec, sequences).sum(axis=1)
    np.testing.assert_allclose(bits, -np.log2(probability / first), rtol=1e-10)


def test_base_composition_of_each_background_state_matches_the_generator(spec, draws):
    outside = draws["variant"] < 0
    for state, composition in enumerate(spec.compositions):
        codes = draws["codes"][outside & (draws["background"] == state)]
        assert codes.size > 10_000
        np.testing.assert_allclose(np.bincount(codes, minlength=4) / codes.size, composition, atol=0.015)
    runs = draws["background"][:, 1:][outside[:, 1:] & outside[:, :-1]]
    stays = (draws["background"][:, 1:] == draws["background"][:, :-1])[outside[:, 1:] & outside[:, :-1]]
    assert runs.size > 10_000 and stays.mean() == pytest.approx(spec.stay, abs=0.01)


def test_planted_motifs_occur_as_generated(spec, draws):
    chain = nucleotide_hmm.build_chain(spec)
    motif_mass = chain.start[chain.variant >= 0].sum()
    assert (draws["variant"] >= 0).mean() == pytest.approx(motif_mass, abs=0.01)
    inside = draws["variant"] >= 0
    expected = spec.variants[draws["variant"][inside], draws["offset"][inside]]
    assert (draws["codes"][inside] == expected).mean() == pytest.approx(1 - spec.mutation, abs=0.01)
    starts = draws["offset"] == 0
    # Inverted repeats: motif occurrences alternate forward motif m, then its reverse complement M + m.
    pairs = 0
    for row, row_starts in zip(draws["variant"], starts, strict=True):
        order = row[row_starts].astype(int)
        forward = np.flatnonzero(order < spec.num_motifs)
        follow = forward[forward + 1 < order.size]
        np.testing.assert_array_equal(order[follow + 1], order[follow] + spec.num_motifs)
        pairs += follow.size
    assert pairs > 500


def test_entropy_rate_lies_between_exact_bounds(spec):
    rate, error = nucleotide.entropy_rate(0)
    chain = nucleotide_hmm.build_chain(spec)
    emission_entropy = -(chain.emissions * np.log2(np.clip(chain.emissions, 1e-300, None))).sum(axis=1)
    marginal = chain.start @ chain.emissions
    # H(X_t | past) >= H(X_t | S_t) (the state makes the past irrelevant) and <= H(X_t).
    assert chain.start @ emission_entropy < rate < -(marginal * np.log2(marginal)).sum() <= 2.0
    assert 0 < error < 0.01
    other = nucleotide_hmm.entropy_rate(spec, seed=5, num_sequences=16, length=2048)
    assert abs(other[0] - rate) < 4 * np.hypot(error, other[1])


def test_splits_are_deterministic_disjoint_and_stored_with_their_labels(tmp_path):
    config = nucleotide.make_config(**SMALL)
    train, again = nucleotide.generate_split(config, "train"), nucleotide.generate_split(config, "train")
    validation = nucleotide.generate_split(config, "validation")
    for name in ("codes", *nucleotide.LABELS):
        np.testing.assert_array_equal(train[name], again[name])
    assert train["codes"].shape == (48, 65) and validation["codes"].shape == (16, 65)
    assert not {row.tobytes() for row in train["codes"]} & {row.tobytes() for row in validation["codes"]}
    sources = [nucleotide.ZooNucleotide.for_config(str(tmp_path / name), config) for name in ("a", "b")]
    for builder in sources:
        builder.download_and_prepare()
    for split, expected in (("train", train), ("validation", validation)):
        first, second = (b.as_data_source(split=split) for b in sources)
        assert len(first) == len(second) == len(expected["codes"])
        for index in (0, len(first) - 1):
            assert first[index]["text"] == second[index]["text"] == nucleotide.to_text(expected["codes"][index])
            for name in nucleotide.LABELS:
                np.testing.assert_array_equal(first[index][name], expected[name][index])


def test_data_config_selects_the_nucleotide_dataset(tmp_path):
    data = DataConfig(name="nucleotide", data_dir=str(tmp_path), nucleotide_length=SMALL["length"],
                      nucleotide_train_examples=SMALL["train_examples"],
                      nucleotide_eval_examples=SMALL["eval_examples"])
    assert zoo_data.vocab_size(data) == 256 and zoo_data.bytes_per_token(data) == 1.0
    batch = next(zoo_data.make_train_iterator(data, batch_size=4, seq_len=64, seed=0, process_index=0,
                                              process_count=1))
    assert set(np.unique(batch["inputs"])) <= set(nucleotide.ASCII_CODES.tolist())
    # seq_len = length - 1: every row is exactly one whole sequence.
    assert (batch["segment_ids"] == 1).all() and (batch["weights"] == 1).all()
    # Bases are ~uniform overall (2 bits); add-one smoothing over 256 byte values adds about
    # log2(1 + 256 / train bytes) on a split this small.
    smoothing = np.log2(1 + 256 / (SMALL["train_examples"] * SMALL["length"]))
    assert 1.98 < zoo_data.unigram_bits_per_byte(data, "validation") < 2.02 + smoothing
    with pytest.raises(ValueError, match="data.nucleotide_length must be an integer >= 2"):
        DataConfig(name="nucleotide", nucleotide_length=1)
    with pytest.raises(ValueError, match="only the bases"):
        nucleotide.to_codes(b"ACGN")


@pytest.mark.parametrize("size", list(EDEN_SHAPES))
def test_presets_match_parameter_counts_within_each_size(size):
    counts = {}
    for arch in EDEN_ARCHS:
        model = nnx.eval_shape(lambda arch=arch: build_model(eden_model(arch, size, max_seq_len=128),
                                                             rngs=nnx.Rngs(0)))
        counts[arch] = count_params(model)
    print(f"\n{size}: " + ", ".join(f"{arch} {count:,}" for arch, count in counts.items()))
    for arch, count in counts.items():
        assert abs(count / counts["llama"] - 1) <= 0.06, (arch, counts)
    assert {eden_model(a, size, max_seq_len=8).mixer for a in EDEN_ARCHS} == {"attention", "mamba", "hyena"}


def test_preset_files_and_datasets():
    for arch, size in itertools.product(EDEN_ARCHS, ("small", "medium")):
        config = load_preset(REPO / "configs" / f"eden_{arch}_{size}.py")
        assert config == eden_lm(arch, size)
        assert config.data.name == "nucleotide" and config.data.nucleotide_length == config.seq_len + 1
    bytes_config = eden_lm("mamba", "small", "pystdlib")
    assert bytes_config.data.name == "pystdlib" and bytes_config.model == eden_lm("mamba", "small").model
    for bad, message in ((("gpt", "small"), "arch must be one of"), (("llama", "huge"), "size must be one of"),
                         (("llama", "small", "mqar"), "dataset must be one of")):
        with pytest.raises(ValueError, match=message):
            eden_lm(*bad)


def test_hyena_presets_train_the_filter_ffn_in_its_own_group():
    from icml26zoo.train.optim import param_group_labels
    from icml26zoo.train.presets import HYENA_FILTER_GROUP

    config = eden_lm("hyena", "tiny")
    assert config.optim.param_groups == (HYENA_FILTER_GROUP,) and HYENA_FILTER_GROUP[2] == 0.0
    assert config.optim.learning_rate * HYENA_FILTER_GROUP[1] == pytest.approx(1e-3)
    assert eden_lm("llama", "tiny").optim.param_groups == eden_lm("mamba", "tiny").optim.param_groups == ()
    model = nnx.eval_shape(lambda: build_model(config.model, rngs=nnx.Rngs(0)))
    params = nnx.to_pure_dict(nnx.split(model, nnx.Param)[1])
    labels = param_group_labels(config.optim.param_groups, params)
    mixer = labels["layers"]["mixer"]
    grouped = [mixer["filter_out"]["kernel"], *mixer["filter_freqs"].values(),
               *(v for layer in mixer["filter_layers"].values() for v in layer.values())]
    assert set(grouped) == {"group0"}
    assert {mixer["in_proj"]["kernel"], mixer["filter_bias"], labels["embed"]["embedding"]} == {"default"}


def test_motif_occurrences_are_the_whole_planted_motifs(spec, draws):
    found = nucleotide.motif_occurrences(draws["variant"], draws["offset"], spec.motif_length, spec.num_motifs)
    starts = draws["offset"] == 0
    whole = starts.copy()
    whole[:, draws["offset"].shape[1] - spec.motif_length + 1 :] = False
    assert found["row"].size == whole.sum() > 1000
    window = found["start"][:, None] + np.arange(spec.motif_length)
    assert (draws["variant"][found["row"][:, None], window] == found["variant"][:, None]).all()
    # The bases agree with the canonical motif up to the generator's 5% mutations.
    same = draws["codes"][found["row"][:, None], window] == spec.variants[found["variant"]]
    assert same.mean() == pytest.approx(1 - spec.mutation, abs=0.01)
    paired = found["paired"]
    assert paired.any() and (found["variant"][paired] >= spec.num_motifs).all()
    # A paired second arm's first arm is the previous motif start of its row.
    index = np.flatnonzero(paired)[0]
    previous = np.flatnonzero(starts[found["row"][index], : found["start"][index]])[-1]
    assert draws["variant"][found["row"][index], previous] == found["variant"][index] - spec.num_motifs
    with pytest.raises(ValueError, match="variant and offset must be"):
        nucleotide.motif_occurrences(draws["variant"], draws["offset"][:, :5], 10, 4)


def test_next_base_probabilities_are_causal_distributions(spec, draws):
    codes = draws["codes"][:8, :40].astype(np.int64)
    probabilities = nucleotide_hmm.next_base_probabilities(spec, codes)
    np.testing.assert_allclose(probabilities.sum(axis=2), 1.0, atol=1e-12)
    chain = nucleotide_hmm.build_chain(spec)
    np.testing.assert_allclose(probabilities[:, 0], np.broadcast_to(chain.start @ chain.emissions, (8, 4)))
    changed = codes.copy()
    changed[:, 20:] = (changed[:, 20:] + 1) % 4
    after = nucleotide_hmm.next_base_probabilities(spec, changed)
    np.testing.assert_array_equal(after[:, :21], probabilities[:, :21])
    assert not np.allclose(after[:, 21:], probabilities[:, 21:])
