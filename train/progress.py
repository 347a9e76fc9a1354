"""A tqdm progress bar showing step, loss, tokens/s, MFU and (tqdm's own) ETA."""

from __future__ import annotations

from collections.abc import Mapping

from tqdm.auto import tqdm

# Weight of the newest log window in the bar's running rates: about the last five windows count.
RATE_SMOOTHING = 0.3
RATES = ("perf/tokens_per_sec", "perf/mfu")


class SmoothedRates:
    """Exponential averages of the throughput metrics over log windows, leaving out the first window (it holds
    the compilation, which would make a tiny run's MFU read 0.2 % and then jump by two orders of magnitude).
    metrics.jsonl keeps every window's raw value; only the bar shows the average."""

    def __init__(self, smoothing: float = RATE_SMOOTHING):
        self._smoothing = smoothing
        self._windows = 0
        self._values: dict[str, float] = {}

    def update(self, metrics: Mapping[str, float]) -> dict[str, float] | None:
        """The averages after this window's `metrics`, or None during the first window."""
        self._windows += 1
        if self._windows == 1:
            return None
        for name in RATES:
            new = float(metrics[name])
            old = self._values.get(name)
            self._values[name] = new if old is None else old + self._smoothing * (new - old)
        return dict(self._values)


class Progress:
    """Progress over micro-steps `[start, stop)`; a no-op when disabled (e.g. on processes other than 0)."""

    def __init__(self, start: int, stop: int, *, enabled: bool = True):
        self._bar = None
        self._rates = SmoothedRates()
        if enabled:
            self._bar = tqdm(total=stop, initial=start, unit="step", dynamic_ncols=True, smoothing=0.3)

    def update(self, step: int, metrics: Mapping[str, float]) -> None:
        if self._bar is None:
            return
        self._bar.update(step - self._bar.n)
        rates = self._rates.update(metrics)
        shown = {"loss": f"{metrics['train/loss']:.4f}"}
        if rates is None:
            shown["tok_s"] = shown["mfu"] = "(compiling)"
        else:
            shown["tok_s"] = f"{rates['perf/tokens_per_sec']:,.0f}"
            shown["mfu"] = f"{100 * rates['perf/mfu']:.1f}%"
        self._bar.set_postfix(**shown, refresh=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
