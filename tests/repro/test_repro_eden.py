"""icml26zoo.repro.eden: argument errors, the power-law fit, greedy motif completion and its prompts. The SMOKE
run, its command line and resume are the experiment contract's (tests/repro/test_experiments.py)."""


import numpy as np
import pytest
from matplotlib.figure import Figure

from icml26zoo.repro import eden, eden_parts
from icml26zoo.repro.common import Budget
from icml26zoo.train.data import nucleotide

TINY = Budget(steps=1, batch_size=2, seq_len=32)


@pytest.mark.parametrize("kwargs, message", [
    ({"archs": ("llama", "gpt")}, "archs: unknown name 'gpt'"),
    ({"archs": ()}, "archs must name at least one"),
    ({"sizes": ("huge",)}, "sizes: unknown name 'huge'"),
    ({"motif_prefix": 0}, "motif_prefix must be"),
    ({"motif_prefix": 10}, r"motif_prefix must lie in \[1, 9\]"),
    ({"mamba_implementation": "cuda"}, "mamba_implementation must be one of"),
])
def test_bad_arguments_name_the_argument(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        eden.run(tmp_path / "run", budget=TINY, **kwargs)
    assert not (tmp_path / "run").exists()


def test_power_law_fit_recovers_a_planted_exponent():
    params = np.array([1e4, 3e4, 1e5, 1e4, 3e4, 1e5])
    noise = np.array([1.02, 0.99, 1.01, 0.98, 1.01, 0.99])
    losses = 1.7 + 40.0 * params ** -0.35 * noise
    fit = eden_parts.power_law_fit(params, losses, floor=1.7)
    assert fit["alpha"] == pytest.approx(0.35, abs=0.02) and 0 < fit["alpha_se"] < 0.02 and fit["points"] == 6
    exact = eden_parts.power_law_fit(params[:3], 1.7 + 40.0 * params[:3] ** -0.35, floor=1.7)
    assert exact["alpha"] == pytest.approx(0.35, rel=1e-9) and exact["coefficient"] == pytest.approx(40.0)
    # Ignoring the floor flattens the law; two points leave no error estimate; one size or a loss at the
    # floor fits nothing.
    assert eden_parts.power_law_fit(params, losses)["alpha"] < 0.2
    assert eden_parts.power_law_fit(params[:2], losses[:2], floor=1.7)["alpha_se"] is None
    assert eden_parts.power_law_fit([1e4, 1e4], [2.0, 2.1])["alpha"] is None
    assert eden_parts.power_law_fit(params, losses, floor=float(losses.min()))["alpha"] is None
    figure = eden_parts.scaling_figure({"llama": (params, losses - 1.7)}, {"llama": fit}, title="t")
    assert isinstance(figure, Figure)


@pytest.fixture(scope="module")
def prompts():
    config = nucleotide.make_config(65, 8, 64)
    split = nucleotide.generate_split(config, "validation")
    return eden_parts.motif_prompts(split, nucleotide.spec(config), seq_len=64, prefix=4), nucleotide.spec(config)


def test_prompts_are_cut_inside_whole_motifs(prompts):
    prompts, spec = prompts
    assert prompts.codes.shape[1] == 64 and prompts.target.shape == (prompts.cut.size, spec.motif_length - 4)
    assert (prompts.cut + prompts.target.shape[1] <= 64).all() and prompts.paired.any()
    # The rows hold the motifs up to the generator's mutations.
    window = prompts.cut[:, None] + np.arange(prompts.target.shape[1])
    agree = prompts.codes[np.arange(prompts.cut.size)[:, None], window] == prompts.target
    assert 0.85 < agree.mean() < 1.0
    with pytest.raises(ValueError, match="seq_len=8 leaves no planted motif"):
        eden_parts.motif_prompts(nucleotide.generate_split(nucleotide.make_config(65, 8, 64), "validation"), spec,
                                 seq_len=8, prefix=4)


def test_greedy_completion_feeds_its_own_predictions_back(prompts):
    prompts, spec = prompts
    # "Repeat the last base": the completion must repeat the base just before the cut, never look ahead.
    repeat = lambda codes: np.eye(4)[codes]
    completion = eden_parts.greedy_completion(repeat, prompts)
    before = prompts.codes[np.arange(prompts.cut.size), prompts.cut - 1]
    np.testing.assert_array_equal(completion, np.repeat(before[:, None], completion.shape[1], axis=1))
    np.testing.assert_array_equal(prompts.codes[np.arange(prompts.cut.size), prompts.cut - 1], before)
    # The true generator completes most motifs, the paired second arms (fixed by their first arm) best.
    scores = eden_parts.completion_accuracy(
        eden_parts.greedy_completion(eden_parts.generator_predict(spec), prompts), prompts)
    assert 0.6 < scores["motif_acc"] < scores["paired_acc"] <= 1.0
    assert eden_parts.completion_accuracy(completion, prompts)["motif_acc"] < 0.5
