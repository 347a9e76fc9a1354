"""A tqdm progress bar showing step, loss, tokens/s, MFU and (tqdm's own) ETA."""

from __future__ import annotations

from collections.abc import Mapping

from tqdm.auto import tqdm


class Progress:
    """Progress over micro-steps `[start, stop)`; a no-op when disabled (e.g. on processes other than 0)."""

    def __init__(self, start: int, stop: int, *, enabled: bool = True):
        self._bar = None
        if enabled:
            self._bar = tqdm(total=stop, initial=start, unit="step", dynamic_ncols=True, smoothing=0.3)

    def update(self, step: int, metrics: Mapping[str, float]) -> None:
        if self._bar is None:
            return
        self._bar.update(step - self._bar.n)
        self._bar.set_postfix(
            loss=f"{metrics['train/loss']:.4f}",
            tok_s=f"{metrics['perf/tokens_per_sec']:,.0f}",
            mfu=f"{100 * metrics['perf/mfu']:.1f}%",
            refresh=False,
        )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
