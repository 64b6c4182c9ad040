"""The profiler's side of sampled communication (docs/profiler.md, "Communication under FSDP"): the
steps of a ``torch.profiler`` window are held until it ends, and every other step carries the latest
window's estimate. ``collectives.py`` runs and reads the windows.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from trainperf.profiler.collectives import CollectiveSampler
from trainperf.profiler.record import StepRecord


class CommSampling:
    """The sampling methods of ``StepProfiler``, on its state: ``_sampler`` (None: no sampling),
    ``_sampling`` (``every``, ``steps``), ``_pending`` (the steps not yet written)."""

    _sampler: CollectiveSampler | None
    _pending: deque[StepRecord]

    def _start_sampling(self: Any) -> None:
        """Sample communication from now on, and say how in the manifest."""
        if self._sampler is None:
            self._sampler = CollectiveSampler(self._torch, self._cuda, self.warmup_steps, *self._sampling)
            self._config["comm_measurement"] = self._sampler.describe()
            self._write_manifest()

    def _sample(self, record: StepRecord) -> None:
        """Before the step's end mark: in a window, hold the step until the window ends, or end it with its
        last step (so that reading it costs a sampled step); otherwise give the step the latest estimate."""
        assert self._sampler is not None
        if self._sampler.active:
            if self._sampler.last_of_window(record.index):
                record.estimate = self._end_window()
            else:
                record.waiting = True
        else:
            record.estimate = self._sampler.estimate

    def _end_window(self: Any) -> tuple[float, float] | None:
        """Close an open window, give its estimate to the steps held for it, and return it."""
        if self._sampler is None or not self._sampler.active:
            return None
        try:
            estimate = self._sampler.stop()
        except Exception as exc:  # sampling stops; the profiler goes on
            self._warn_once("sampling", f"communication is not sampled: {type(exc).__name__}: {exc}")
            self._sampler.cancel()
            self._sampler, estimate = None, None
        for held in self._pending:
            if held.waiting:
                held.waiting, held.estimate = False, estimate
        return estimate
