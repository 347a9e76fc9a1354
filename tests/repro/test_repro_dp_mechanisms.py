"""The DP-mechanisms reproduction: bad arguments, and its parts on tiny inputs (the DP-SGD noise calibration, a
DP-SGD run; the MoG calibration is tested in tests/zoo). The SMOKE experiment itself runs in the experiment
contract (tests/repro/test_experiments.py: the notebook at SMOKE, one-line errors, outputs, resume through the
command line)."""

from __future__ import annotations

import math

import pytest

from icml26zoo.privacy import accounting, gaussian, mog
from icml26zoo.repro import common, dp_mechanisms
from icml26zoo.repro import dp_mechanisms_parts as parts


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"eps_values": (1.0, 0.0)}, r"eps_values\[i\] must be a finite positive number, got 0.0"),
        ({"eps_values": ()}, "eps_values must hold at least one value"),
        ({"deltas": (1.0,)}, r"deltas\[i\] must be a number in \(0, 1\), got 1.0"),
        ({"spacings": (-1.0,)}, r"spacings\[i\] must be a finite positive number, got -1.0"),
        ({"powers": (1.5, 2.0)}, "powers must include 1 and 2"),
        ({"dims": (0,)}, r"dims\[i\] must be an integer >= 1, got 0"),
        ({"compositions": (1.5,)}, r"compositions\[i\] must be an integer >= 1, got 1.5"),
        ({"dp_eps": -1.0}, "dp_eps must be a finite positive number, got -1.0"),
        ({"sgg_delta": 0.0}, "sgg_delta"),
        ({"workers": 0}, "workers must be an integer >= 1"),
    ],
)
def test_bad_arguments_raise_naming_the_field(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        dp_mechanisms.run(tmp_path / "run", budget=dp_mechanisms.QUICK, **kwargs)
    assert not (tmp_path / "run").exists()  # rejected before anything is written


def test_dpsgd_noise_meets_the_target_after_all_releases():
    settings = parts.dpsgd_noise_settings(1.0, 1e-5, 3, 4, (300, 300))
    gauss = accounting.gaussian_pld(settings["gaussian"]["scale"], discretization=1e-3)
    assert accounting.composed_epsilon(gauss, 3, 1e-5) == pytest.approx(1.0, rel=5e-3)
    # Three Gaussian releases at sensitivity 1 are one release at sensitivity √3.
    assert settings["gaussian"]["scale"] == pytest.approx(math.sqrt(3) * gaussian.analytic_gaussian_sigma(1.0, 1e-5))
    sgg_pld = accounting.sgg_pld(settings["sgg"]["scale"], 4, 1.0, 4, grid=(300, 300), discretization=2e-3)
    assert accounting.composed_epsilon(sgg_pld, 3, 1e-5) <= 1.0


def test_dpsgd_run_learns_the_blobs_task():
    accuracy = parts.train_dpsgd("gaussian", {"scale": 1.0}, steps=20, batch_size=50, seed=0, clip_norm=1.0,
                                 learning_rate=0.5, train_size=500)
    assert accuracy > 0.6  # chance is 0.25


def test_printed_sigmas_meet_delta_when_parsed_back():
    """At (ε, δ) = (4, 1e-5) the calibrated MoG σ is 0.25333, and 0.253 (3 digits, rounded to nearest) gives
    δ ≈ 1.17e-5: the printed σ of each setting and the printed Gaussian σ, parsed back, meet δ on the zoo's
    accountants (the MoG's on the calibration shifts and on the 256 verification shifts)."""
    eps, delta = 4.0, 1e-5
    row = parts.mog_row(eps, delta, (1.0,), (1.0,))
    weights = mog.geometric_weights(eps, parts.MOG_RADIUS)
    for loss in ("l1", "l2"):
        setting = dict(item.split("=") for item in row[f"mog_{loss}_setting"].split(", "))
        assert (setting["lambda"], setting["m"]) == ("4", "1")
        sigma = float(setting["sigma"])
        for shifts in (parts.CALIBRATION_SHIFTS, parts.VERIFY_SHIFTS):
            assert mog.mog_delta(eps, sigma, weights, 1.0, s_grid=mog.default_shift_grid(1.0, shifts)) <= delta
    assert mog.mog_delta(eps, 0.253, weights, 1.0) > delta  # the old 3-digit print did not meet δ
    shown = float(common.markdown_table([row], ("gauss_sigma",))[2].strip("| "))
    assert gaussian.analytic_gaussian_delta(eps, shown) <= delta
    assert shown == pytest.approx(gaussian.analytic_gaussian_sigma(eps, delta), rel=1e-3)


def test_printed_sigma_rounds_up_until_the_target_is_met():
    assert parts.ceil_significant(0.25332544606983964, 3) == 0.254
    assert parts.ceil_significant(0.254, 3) == 0.254
    assert parts.printed_sigma(0.25332544606983964, lambda s: True) == "0.254"
    # A target met only from 0.2534 on: 3 digits (0.254) fail, so 4 digits are printed.
    assert parts.printed_sigma(0.25332544606983964, lambda s: abs(s - 0.2534) < 1e-12) == "0.2534"
    assert parts.printed_sigma(0.25332544606983964, lambda s: False) == "0.25332544606983964"
