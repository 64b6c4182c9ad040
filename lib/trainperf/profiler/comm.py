"""Gradient communication under DDP: a communication hook marks when each bucket is handed over and
when its all-reduce completes, and DDP's broadcast of the buffers is timed; ``comm_s`` and
``comm_exposed_s`` from those marks: docs/profiler.md, "Communication under DDP".

The completion mark is taken by a callback on the backend's thread, which frees it only after DDP saw
the all-reduce complete; freeing it after the training thread reached interpreter exit aborts the process
(gloo: "terminate called without an active exception"). So :meth:`DdpCommTimer.stop` waits until every
callback is let go, and the default hook adds no callback of its own.
"""

from __future__ import annotations

import time
import weakref
from collections import deque
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from trainperf.profiler.clocks import Clock

SETTLE_S = 5.0
"""How long :meth:`DdpCommTimer.stop` waits at most for the backend threads to let go of the callbacks (s)."""


@dataclass(slots=True, eq=False)
class CommInterval:
    """One gradient all-reduce or broadcast of the buffers; ``last``: the step computes nothing behind its
    end (the last bucket of a backward pass, a broadcast)."""

    start: Any
    last: bool
    end: Any = None


class DdpCommTimer:
    """The timing DDP communication hook and the intervals it recorded since the last :meth:`drain`."""

    def __init__(self, clock: Clock, inner_hook: Any, inner_state: Any) -> None:
        self._clock = clock
        self._inner_hook = inner_hook
        self._inner_state = inner_state
        self._intervals: list[CommInterval] = []
        self._stopped = False
        self._held: set[weakref.ref] = set()  # completion callbacks a backend thread may still hold
        self._let_go: deque[weakref.ref] = deque()  # filled without Python code: safe on any thread

    def hook(self, state, bucket):  # type: ignore[no-untyped-def]
        """The DDP communication hook (``state`` unused: the wrapped hook gets its own). Not annotated:
        DDP rejects a hook whose annotations are not its own types."""
        if self._stopped:
            return self._inner_hook(self._inner_state, bucket)
        interval = CommInterval(self._clock.mark(), bucket.is_last())
        self._intervals.append(interval)
        future = self._inner_hook(self._inner_state, bucket)

        def done(fut: Any) -> Any:
            # runs when the all-reduce completed; on CUDA with the stream that
            # waits for it current, so the mark lands after it on the device
            with suppress(Exception):  # a timing failure must not fail the all-reduce
                interval.end = self._clock.mark()
            value = fut.value()  # the all-reduce's own future (average) holds a list of the one bucket tensor
            return value[0] if isinstance(value, list) else value

        self._held.add(weakref.ref(done, self._let_go.append))
        return future.then(done)

    def time_buffer_broadcast(self, model: Any) -> None:
        """Time DDP's broadcast of ``model``'s buffers at the start of every forward (``broadcast_buffers``,
        its default): the forward waits for it, so it is an interval of its own, all of it exposed."""
        broadcast = getattr(model, "_sync_buffers", None)
        if broadcast is None:
            return

        def timed() -> None:
            if self._stopped:
                return broadcast()
            interval = CommInterval(self._clock.mark(), True)
            broadcast()
            interval.end = self._clock.mark()
            self._intervals.append(interval)

        model._sync_buffers = timed

    def stop(self) -> None:
        """Stop timing: the hook only all-reduces. Returns once the backend threads let go of every
        completion callback (at most :data:`SETTLE_S`), so that the process may exit."""
        self._stopped = True
        self._intervals = []
        deadline = time.monotonic() + SETTLE_S
        while self._forget_let_go() and time.monotonic() < deadline:
            time.sleep(0.001)

    def _forget_let_go(self) -> int:
        """Forget the callbacks let go of; the number still held."""
        while self._let_go:
            self._held.discard(self._let_go.popleft())
        return len(self._held)

    def drain(self) -> list[CommInterval]:
        """The intervals recorded since the last call, in the order the buckets became ready."""
        intervals, self._intervals = self._intervals, []
        self._forget_let_go()
        return intervals


def comm_seconds(intervals: list[tuple[float, float, bool]]) -> tuple[float, float]:
    """``(comm_s, comm_exposed_s)`` from ``(start_s, end_s, last_bucket)`` in the order the buckets became ready."""
    total = union_length([(s, e) for s, e, _ in intervals])
    return total, sum(end - start for start, end in exposed_intervals(intervals))


def merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of ``(start, end)`` intervals as disjoint sorted intervals."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of ``(start, end)`` intervals."""
    return sum(end - start for start, end in merged(intervals))


def overlap(spans: list[tuple[float, float]], others: list[tuple[float, float]]) -> float:
    """Total length of the intersections of two lists of disjoint ``(start, end)`` intervals."""
    total, first, others = 0.0, 0, sorted(others)
    for start, end in sorted(spans):
        while first < len(others) and others[first][1] <= start:
            first += 1
        for other_start, other_end in others[first:]:
            if other_start >= end:
                break
            total += min(end, other_end) - max(start, other_start)
    return total


def exposed_intervals(intervals: list[tuple[float, float, bool]]) -> list[tuple[float, float]]:
    """Per backward pass, ``(ready time of the last bucket, last all-reduce end)``: the stretch in which
    the rank only waits for communication (s)."""
    exposed = []
    pass_end = float("-inf")
    for start, end, last in intervals:
        pass_end = max(pass_end, end)
        if last:
            if pass_end > start:
                exposed.append((start, pass_end))
            pass_end = float("-inf")
    return exposed


def average(group: Any, bucket: Any) -> Any:
    """DDP's ``allreduce_hook`` (``group`` None: the default group), returning the all-reduce's future
    itself, with no Python callback on it."""
    import torch.distributed as dist

    group = group if group is not None else dist.group.WORLD
    tensor = bucket.buffer()
    tensor.div_(group.size())
    return dist.all_reduce(tensor, group=group, async_op=True).get_future()


def watch_ddp(model: Any, clock: Clock, comm_hook: Any = None, comm_state: Any = None) -> DdpCommTimer:
    """Time a ``DistributedDataParallel`` model's communication: a hook wrapping ``comm_hook`` (default:
    :func:`average` on the model's process group) and its buffers' broadcast. The hook holds no
    reference to the default group, which the last step's callbacks would keep past
    ``destroy_process_group()``."""
    if comm_hook is None:
        import torch.distributed as dist

        group = getattr(model, "process_group", None)
        comm_hook, comm_state = average, None if group is dist.group.WORLD else group
    timer = DdpCommTimer(clock, comm_hook, comm_state)
    model.register_comm_hook(None, timer.hook)
    timer.time_buffer_broadcast(model)
    return timer


def strategy_of(model: Any) -> str | None:
    """``ddp``, ``fsdp`` or None for a model that is neither."""
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(model, DistributedDataParallel):
        return "ddp"
    try:
        from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel
    except ImportError:
        return None
    return "fsdp" if isinstance(model, (FSDPModule, FullyShardedDataParallel)) else None
