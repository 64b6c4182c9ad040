"""Start many Jupyter kernels at the same moment and count the ones that fail.

The report build runs notebooks in parallel and the test suite runs several
builds at once, so kernels start together. Over TCP each client picks free
ports and releases them before its kernel binds them, so two kernels can be
handed the same port (``ZMQError: Address already in use``, then "Kernel died
before replying to kernel_info"). ``trainperf.report.build.kernels.IPCKernelManager``
gives every kernel its own Unix sockets instead.

    PYTHONPATH=lib .venv/bin/python benchmarks/kernel_start.py --kernels 12 --rounds 5

Each round starts ``--kernels`` kernels at once (``--processes`` processes,
each starting its share concurrently), waits for each to answer
``kernel_info`` and run one cell, and shuts them down. Prints one row per
transport: kernels started, failures, seconds. Exit status 1 if an IPC kernel failed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from jupyter_client.manager import AsyncKernelManager

from trainperf.report.build.kernels import IPCKernelManager
from trainperf.report.build.kernels import KERNEL

MANAGERS = {"ipc": IPCKernelManager, "tcp": AsyncKernelManager}


async def _one(transport: str) -> str | None:
    """Start a kernel, run ``1 + 1``, shut it down; the error text, or None."""
    km = MANAGERS[transport](kernel_name=KERNEL)
    try:
        await km.start_kernel(extra_arguments=["--IPKernelApp.log_level=CRITICAL"])
        if km.transport != transport:
            return f"transport is {km.transport}, not {transport}"
        client = km.client()
        client.start_channels()
        try:
            await client.wait_for_ready(timeout=120)
            reply = await client.execute_interactive("1 + 1", timeout=120, output_hook=lambda msg: None)
            if reply["content"]["status"] != "ok":
                return f"cell status {reply['content']['status']}"
        finally:
            client.stop_channels()
        return None
    except Exception as exc:  # noqa: BLE001 -- every failure is counted
        return f"{type(exc).__name__}: {exc}"
    finally:
        if km.has_kernel:
            await km.shutdown_kernel(now=True)


def _batch(transport: str, count: int) -> list[str | None]:
    async def together() -> list[str | None]:
        return list(await asyncio.gather(*(_one(transport) for _ in range(count))))

    return asyncio.run(together())


def run(transport: str, kernels: int, processes: int, rounds: int) -> tuple[int, list[str], float]:
    """Kernels started, the failures' messages, seconds."""
    shares = [kernels // processes + (i < kernels % processes) for i in range(processes)]
    errors: list[str] = []
    start = time.perf_counter()
    with ProcessPoolExecutor(processes) as pool:
        for _ in range(rounds):
            for result in pool.map(_batch, [transport] * processes, shares):
                errors += [e for e in result if e]
    return kernels * rounds, errors, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", type=int, default=12, help="kernels started at once per round")
    parser.add_argument("--processes", type=int, default=4, help="processes they are started from")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--transport", nargs="+", choices=sorted(MANAGERS), default=["ipc", "tcp"])
    args = parser.parse_args(argv)
    print("| transport | kernels started | failed | seconds |")
    print("|---|---:|---:|---:|")
    failed_ipc = 0
    for transport in args.transport:
        started, errors, seconds = run(transport, args.kernels, args.processes, args.rounds)
        print(f"| {transport} | {started} | {len(errors)} | {seconds:.0f} |", flush=True)
        for message in sorted(set(errors)):
            print(f"    {errors.count(message)} x {message[:160]}", file=sys.stderr)
        failed_ipc += len(errors) if transport == "ipc" else 0
    return 1 if failed_ipc else 0


if __name__ == "__main__":
    sys.exit(main())
