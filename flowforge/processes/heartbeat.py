"""The heartbeat: a thread that renews a claim's lease every ``lease_seconds / 3``.

Renewal carries the claim's fencing token, so it only extends a lease this worker still
holds. When a renewal returns False the lease was lost (reaped, the token moved on): the
heartbeat stops, and the worker's eventual finish is rejected as stale. A renewal never
makes a legitimate finish lose: the finish's condition is the state and the token, which
a renewal does not change.
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType

from flowforge import errors
from flowforge.app.results import Claim
from flowforge.app.service import FlowForge

log = logging.getLogger(__name__)


class Heartbeat:
    """Renews one claim's lease until exited or the lease is lost."""

    def __init__(self, app: FlowForge, claim: Claim, lease_seconds: float, worker_id: str) -> None:
        self._app = app
        self._claim = claim
        self._lease_seconds = lease_seconds
        self._worker_id = worker_id
        self._done = threading.Event()
        self.lost = False
        self.renewals = 0
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Stop renewing before the finish is written: no renewal is left in flight.
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        interval = self._lease_seconds / 3
        while not self._done.wait(interval):
            try:
                renewed = self._app.renew_lease(
                    self._claim.task_run_id,
                    self._claim.fencing_token,
                    self._lease_seconds,
                    actor=self._worker_id,
                )
            except errors.PersistenceError as exc:
                # The lease may still be ours; the next beat tries again.
                log.warning("lease renewal failed", extra=self._extra(error=str(exc)))
                continue
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
