"""A worker lost too often: FlowForge's bound on the spec's reaper.

The spec's ``reap_lease`` (running -> ready) spends no attempt, so a handler that ends
its own process (``os._exit``, a segfault, the OOM killer) would be reclaimed and run
again for ever. A task counts its lost workers (``worker_losses``: its leases that
expired); the reclaim that reaches its bound (``max_worker_losses``) takes the fail edge
instead, with a ``WorkerLost`` error, and the retry policy applies as to any failure
(docs/execution-model.md, "A worker lost too often"). Pure: no I/O.
"""

from __future__ import annotations

#: A task's bound of lost workers when its definition sets none (and in rows created
#: before the bound existed): small, so that a handler that kills its own worker fails
#: after a few tries rather than running for ever.
DEFAULT_MAX_WORKER_LOSSES = 3
#: The error type of an attempt failed for losing its worker too often (``reclaim``).
WORKER_LOST = "WorkerLost"


def worker_losses_bound(max_worker_losses: int | None) -> int:
    """A task's bound of lost workers: its own, or the default."""
    return DEFAULT_MAX_WORKER_LOSSES if max_worker_losses is None else max_worker_losses


def loses_for_good(losses: int, max_worker_losses: int | None) -> bool:
    """Whether the reaper's reclaim that makes ``losses`` lost workers fails the attempt
    (``WorkerLost``) rather than making the task ready again. The count is never reset,
    so after the bound every further loss fails its attempt at once (the crash loop ends
    for good; the retry policy decides what follows each failure)."""
    return losses >= worker_losses_bound(max_worker_losses)


def worker_lost_error(losses: int, max_worker_losses: int | None) -> dict[str, str]:
    """What the audit log records of an attempt failed for losing its worker too often."""
    bound = worker_losses_bound(max_worker_losses)
    return {
        "type": WORKER_LOST,
        "message": f"lost its worker {losses} times (max_worker_losses = {bound}): its "
        f"lease expired with no finish (the worker process died: killed, crashed, out "
        f"of memory), and the reaper failed the attempt instead of dispatching it again",
        "traceback": "",
    }
