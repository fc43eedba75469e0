"""The heartbeat: a thread that renews a claim's lease every ``lease_seconds / 3``.

Its first renewal is due a third of the lease after the claim is entered, so a handler
that returns well before then needs no renewal at all. With ``start_after`` the worker
hands the renewals to the heartbeat's lane only once the handler has run that long
(:meth:`Heartbeat.keep_up`, called while it waits for the handler): most tasks of a busy
worker are short, and each hand-off to the lane and back cost a thread wake-up.

Renewal carries the claim's fencing token, so it only extends a lease this worker still
holds. When a renewal returns False the lease was lost (reaped, the token moved on): the
heartbeat stops, and the worker's eventual finish is rejected as stale. A renewal never
makes a legitimate finish lose: the finish's condition is the state and the token, which
a renewal does not change.

A renewal that fails for a transient database error is retried at the next beat (the
lease may still be ours). Any other error stops the heartbeat and is reported: logged
with its traceback and kept in :attr:`Heartbeat.error`, never a silently dead thread.
"""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType
from typing import Protocol
from uuid import UUID

from flowforge import errors, observe
from flowforge.app.results import Claim
from flowforge.processes.lane import Done, Lane

log = logging.getLogger(__name__)


class LeaseRenewer(Protocol):
    """What the heartbeat needs of the application (``FlowForge.renew_lease``)."""

    def renew_lease(
        self,
        task_run_id: UUID,
        fencing_token: int,
        lease_seconds: float,
        *,
        actor: str | None = None,
    ) -> bool: ...


def renewal_retryable(exc: BaseException) -> bool:
    """Whether a failed renewal is tried again at the next beat.

    A database error that is not known to be permanent may pass (the database comes
    back, the conflict clears). A permanent one, an unknown task run or a bug will not:
    retrying it every beat would only hide it.
    """
    return isinstance(exc, errors.PersistenceError) and not isinstance(
        exc, errors.PermanentPersistenceError
    )


class Heartbeat:
    """Renews one claim's lease until exited or the lease is lost: every third of the
    lease, counted from entering.

    ``start_after`` (seconds, less than a third of the lease) leaves the lane alone
    until :meth:`keep_up` is called that long after entering; 0 starts it on entering.
    """

    def __init__(
        self,
        app: LeaseRenewer,
        claim: Claim,
        lease_seconds: float,
        worker_id: str,
        lane: Lane | None = None,
        *,
        start_after: float = 0.0,
    ) -> None:
        if not 0 <= start_after < lease_seconds / 3:
            raise ValueError(
                f"start_after must be at least 0 and less than a third of the lease "
                f"({lease_seconds} s), so that the first renewal is never late; got "
                f"{start_after}"
            )
        self._app = app
        self._claim = claim
        self._lease_seconds = lease_seconds
        self._worker_id = worker_id
        self._done = threading.Event()
        self.lost = False
        #: The error that stopped the heartbeat, if one did.
        self.error: BaseException | None = None
        self.renewals = 0
        #: The worker's lane, reused claim after claim (a new one if none is given).
        self._lane = lane or Lane("heartbeat")
        self._start_after = start_after
        self._entered = 0.0
        self._stopped: Done | None = None

    @property
    def started(self) -> bool:
        """Whether the renewals were handed to the lane."""
        return self._stopped is not None

    def __enter__(self) -> Heartbeat:
        self._entered = time.monotonic()
        self.keep_up()  # with no start_after, the hand-over is now
        return self

    def keep_up(self) -> None:
        """Hand the renewals to the lane once ``start_after`` has passed since entering
        (the first renewal is still due a third of the lease after entering)."""
        if self._stopped is None and time.monotonic() - self._entered >= self._start_after:
            self._stopped = self._lane.run(self._run)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Stop renewing before the finish is written: no renewal is left in flight.
        self._done.set()
        if self._stopped is not None:
            self._stopped.wait()

    def _run(self) -> None:
        interval = self._lease_seconds / 3
        wait = max(0.0, self._entered + interval - time.monotonic())
        while not self._done.wait(wait):
            wait = interval
            try:
                renewed = self._app.renew_lease(
                    self._claim.task_run_id,
                    self._claim.fencing_token,
                    self._lease_seconds,
                    actor=self._worker_id,
                )
            except Exception as exc:
                observe.announce.heartbeat_failed()
                if renewal_retryable(exc):
                    # The lease may still be ours; the next beat tries again.
                    log.warning("lease renewal failed", extra=self._extra(error=str(exc)))
                    continue
                self.error = exc
                log.exception(
                    "heartbeat failed; lease no longer renewed", extra=self._extra(error=str(exc))
                )
                return
            if not renewed:
                self.lost = True
                log.warning("lease lost; heartbeat stopped", extra=self._extra())
                return
            self.renewals += 1

    def _extra(self, **fields: object) -> dict[str, object]:
        return {
            "worker_id": self._worker_id,
            "task_run_id": str(self._claim.task_run_id),
            "fencing_token": self._claim.fencing_token,
            **fields,
        }
