"""The scheduler process: ``schedule_once`` on an interval, until stopped."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict
from uuid import UUID

from flowforge import errors
from flowforge.app.results import ScheduleSummary
from flowforge.app.service import REDISPATCH_AFTER_S, FlowForge
from flowforge.processes.loop import Stop

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 1.0


class Scheduler:
    """Reaps expired leases and advances every active run, every ``interval`` seconds.

    Several schedulers may run at once: the conditional writes decide, so nothing is
    promoted, retried or reaped twice.
    """

    def __init__(
        self,
        app: FlowForge,
        *,
        interval: float = DEFAULT_INTERVAL_S,
        redispatch_after: float = REDISPATCH_AFTER_S,
        stop: Stop | None = None,
        covers: Callable[[UUID], bool] | None = None,
    ) -> None:
        self.app = app
        self.interval = interval
        self.redispatch_after = redispatch_after
        self.stop = stop or Stop()
        #: Which runs this scheduler advances (all, if None): see ProcessGroup.
        self.covers = covers

    def run_once(self) -> ScheduleSummary:
        summary = self.app.schedule_once(
            redispatch_after=self.redispatch_after, covers=self.covers
        )
        changes = asdict(summary)
        changes.pop("runs_advanced")
        if any(changes.values()):
            log.info("scheduler pass", extra=asdict(summary))
        return summary

    def run(self) -> None:
        """Loop until a stop is requested; a database outage is logged and retried."""
        self.stop.install_signal_handlers()
        log.info("scheduler started", extra={"interval": self.interval})
        while not self.stop.is_set():
            try:
                self.run_once()
            except (errors.PersistenceError, errors.NotFoundError) as exc:
                # NotFoundError: a run that vanished mid-pass (its rows being rebuilt) is
                # simply advanced by the next pass, as a database hiccup is.
                log.warning("scheduler pass failed; retrying", extra={"error": str(exc)})
            self.stop.wait(self.interval)
        log.info("scheduler stopped", extra={"reason": self.stop.reason})
