"""Writing a profiler's last batch of steps when its process ends without
``close()``: at interpreter exit and on SIGTERM or SIGINT.

A signal handler already installed is chained, never replaced: after the
batch is written, the previous Python handler runs (SIGINT's raises
``KeyboardInterrupt`` as before); where there was none (the default action),
the default is restored and the signal sent again, so the process ends as it
would have without the profiler; an ignored signal stays ignored. A handler
installed by C code (which Python cannot call) is left alone, and so is a
process's signal handling outside its main thread. Forked children (data
loader workers) inherit the handlers and the exit hook but write nothing:
the steps in their copy of memory are the parent's.
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class ExitFlush:
    """Call ``flush`` at exit and on the signals of :data:`SIGNALS` (in
    this process only) until :meth:`remove`."""

    def __init__(self, flush: Callable[[], None]) -> None:
        self._flush = flush
        self._pid = os.getpid()
        self._previous: dict[int, Any] = {}
        atexit.register(self._at_exit)
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                previous = signal.getsignal(signum)
                if previous is not None:  # None: a handler set from C, which could not be chained
                    self._previous[signum] = previous
                    signal.signal(signum, self._on_signal)

    def _at_exit(self) -> None:
        if os.getpid() == self._pid:
            self._flush()

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._at_exit()
        previous = self._previous.get(signum, signal.SIG_DFL)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def remove(self) -> None:
        """Stop: the exit hook is removed and each signal's previous handler
        restored, unless another handler replaced this one since (it then
        chains to this one, which only passes the signal on)."""
        atexit.unregister(self._at_exit)
        for signum, previous in self._previous.items():
            if signal.getsignal(signum) == self._on_signal:
                signal.signal(signum, previous)
        self._flush = _nothing


def _nothing() -> None:
    return None
