"""The progress bar's throughput: the first (compiling) window left out, then an exponential average."""

import pytest

from icml26zoo.train.progress import Progress, SmoothedRates


def window(tokens_per_sec: float, mfu: float) -> dict[str, float]:
    return {"train/loss": 1.0, "perf/tokens_per_sec": tokens_per_sec, "perf/mfu": mfu}


def test_the_first_window_is_left_out_and_later_ones_are_averaged():
    rates = SmoothedRates(smoothing=0.5)
    assert rates.update(window(10.0, 0.002)) is None  # compilation: would read 0.2 % MFU
    assert rates.update(window(1000.0, 0.2)) == {"perf/tokens_per_sec": 1000.0, "perf/mfu": 0.2}
    averaged = rates.update(window(2000.0, 0.4))
    assert averaged == pytest.approx({"perf/tokens_per_sec": 1500.0, "perf/mfu": 0.3})


def test_the_bar_shows_compiling_then_the_average():
    progress = Progress(0, 4)
    progress.update(1, window(10.0, 0.002))
    assert "mfu=(compiling)" in progress._bar.postfix and "tok_s=(compiling)" in progress._bar.postfix
    progress.update(2, window(1000.0, 0.2))
    assert "mfu=20.0%" in progress._bar.postfix
    progress.close()
