"""The scheduler process: advances the runs that changed, woken at once, with a
periodic safety-net pass."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict

from flowforge import errors
from flowforge.app.archive import RETENTION_RUNS
from flowforge.app.ports import QueueProbe
from flowforge.app.results import ScheduleSummary
from flowforge.app.scope import Scope
from flowforge.app.service import REDISPATCH_AFTER_S, FlowForge
from flowforge.config import RetentionConfig
from flowforge.processes.loop import LISTEN_READY_S, Stop

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 1.0
#: The shortest sleep before a timer pass, so a timer that keeps falling due at once
#: (a retry whose run cannot be advanced) cannot spin the loop.
MIN_TIMER_S = 0.05
#: How often a scheduler with a retention looks for runs to archive.
RETENTION_EVERY_S = 600.0


class Scheduler:
    """Advances marked runs as soon as their wake-up arrives; every ``interval`` (and
    when the next retry or lease expiry falls due) runs the safety net: reap expired
    leases, advance runs with retries due and any marked run whose wake-up was lost,
    redispatch stalled dispatches.

    Several schedulers may run at once: they divide the woken runs (a run another
    scheduler is advancing is skipped), and the conditional writes decide the rest, so
    nothing is promoted, retried or reaped twice.
    """

    def __init__(
        self,
        app: FlowForge,
        *,
        interval: float = DEFAULT_INTERVAL_S,
        redispatch_after: float = REDISPATCH_AFTER_S,
        probe: QueueProbe | None = None,
        stop: Stop | None = None,
        scope: Scope | None = None,
        retention: RetentionConfig | None = None,
    ) -> None:
        self.app = app
        #: Archive ended runs on its own (docs/operations.md, "Retention"); None: never.
        self.retention = retention
        self._next_retention = 0.0
        self.interval = interval
        self.redispatch_after = redispatch_after
        #: Asks the broker how many messages a type's queue holds, for the redispatch
        #: net (``Outbox.redispatch_lost``); None: no net (nothing to ask).
        self.probe = probe
        self.stop = stop or Stop()
        #: The runs this scheduler advances, reaps and redispatches (all, if None):
        #: an embedded runner's (ProcessGroup, ``app/scope.py``).
        self.scope = scope
        self._next_pass = 0.0

    def run_once(self) -> ScheduleSummary:
        """The full pass (the safety net)."""
        summary = self.app.schedule_once(
            redispatch_after=self.redispatch_after, probe=self.probe, scope=self.scope
        )
        _log_changes("scheduler pass", summary)
        return summary

    def step(self) -> float:
        """Advance the woken runs, or run the full pass when it is due; the seconds to
        sleep until the next full pass unless a wake-up comes first."""
        now = time.monotonic()
        timer = None
        try:
            if now >= self._next_pass:
                self._next_pass = now + self.interval
                self.run_once()
                timer = self.app.seconds_to_next_timer(scope=self.scope)
                self._apply_retention(now)
            else:
                summary = self.app.advance_woken_runs(scope=self.scope)
                _log_changes("woken runs advanced", summary)
                # A retry scheduled just now, or a delayed run just submitted (its
                # creation marks it), may fall due before the next full pass; a new
                # lease cannot expire before it (leases outlast the interval).
                if summary.retried or summary.waiting_to_start:
                    timer = self.app.seconds_to_next_timer(scope=self.scope)
        except (errors.PersistenceError, errors.NotFoundError) as exc:
            # NotFoundError: a run that vanished mid-pass (its rows being rebuilt) is
            # simply advanced by the next pass, as a database hiccup is.
            log.warning("scheduler pass failed; retrying", extra={"error": str(exc)})
        if timer is not None:
            self._next_pass = min(self._next_pass, time.monotonic() + max(timer, MIN_TIMER_S))
        return max(0.0, self._next_pass - time.monotonic())

    def _apply_retention(self, now: float) -> None:
        """Every ``RETENTION_EVERY_S``, archive what the retention says has aged out
        (a bounded amount per pass; another scheduler holding the archiver's lock does
        it instead). An embedded runner's scheduler (a scope) leaves it to the others."""
        if self.retention is None or self.scope is not None or now < self._next_retention:
            return
        self._next_retention = now + RETENTION_EVERY_S
        try:
            report = self.app.apply_retention(
                self.retention.archive_after, self.retention.archive_dir
            )
        except (errors.ArchiveError, OSError) as exc:
            log.warning("retention failed; trying again later", extra={"error": str(exc)})
            return
        if report is not None and report.file is not None:
            log.info(
                "runs archived",
                extra={
                    "archive_file": str(report.file),
                    "runs": report.archived,
                    "events": report.archived_events,
                },
            )
            if report.runs >= RETENTION_RUNS:
                self._next_retention = now  # a backlog: the next pass goes on with it

    def run(self) -> None:
        """Loop until a stop is requested; a database outage is logged and retried."""
        self.stop.install_signal_handlers()
        log.info("scheduler started", extra={"interval": self.interval})
        with self.app.listening(ready_timeout=LISTEN_READY_S) as wakeups:
            self.stop.also_wakes(wakeups.runs.ring)
            while not self.stop.is_set():
                wakeups.runs.wait(self.step())
        log.info("scheduler stopped", extra={"reason": self.stop.reason})


def _log_changes(message: str, summary: ScheduleSummary) -> None:
    changes = asdict(summary)
    changes.pop("runs_advanced")
    if any(changes.values()):
        log.info(message, extra=asdict(summary))
