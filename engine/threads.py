"""Thread priorities: the model's threads yield the CPU to the thread that answers the network.

On a machine with few cores the engine's stepping thread, PyTorch's intra-op workers and the
threads that run retrieval and guards keep every core busy. The operating system shares the
cores fairly among them, so the asyncio thread that answers health probes and writes streamed
tokens gets a core only as often as any of them, and a probe waits for seconds. Raising the nice
value of the busy threads (a lower priority; never the reverse, which needs privileges) makes the
scheduler run the event loop first whenever it has work, which is short, and hand the cores back
at once. Threads inherit the value they had when they start their own workers, so a thread
lowers itself before its first PyTorch call.
"""

from __future__ import annotations

import logging
import os
import threading

logger = logging.getLogger(__name__)

_MAX_NICE = 19
_lowered = threading.local()


def lower_thread_priority(increment: int) -> bool:
    """Raise the calling thread's nice value by ``increment`` (once per thread); whether it did.

    Only the calling thread changes (Linux gives each thread its own nice value); where the
    platform cannot, nothing changes and the answer is False.
    """
    if increment <= 0 or getattr(_lowered, "done", False):
        return False
    _lowered.done = True
    if not hasattr(os, "setpriority"):
        return False
    tid = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(_MAX_NICE, current + increment))
    except OSError as exc:  # a sandbox may forbid it: run at the priority we have
        logger.debug("could not lower the priority of thread %s: %s", tid, exc)
        return False
    return True
