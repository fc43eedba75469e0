"""Structured logs of what the seam announces: one stable message and its fields a line,
under the ``flowforge.events`` logger (an observer of ``flowforge.observe``).

Not installed by default: the processes already log what an operator reads (each with
its worker, task and attempt, docs/cli.md), and this observer adds the events that are
otherwise only counted, for a program that wants them as lines (``--log-format json``
writes each as one JSON object): ``observe.install(structured_logs.Logs())``. Leases
reaped, attempts timed out, dispatches returned and dead-lettered, heartbeat failures and
reconnects are warnings or information; the frequent events (transitions, claims skipped,
handler durations, dispatches published) are debug lines.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from flowforge import observe

log = logging.getLogger("flowforge.events")


class Logs(observe.Observer):
    """Each event a log line: ``event`` names it, the other fields say how many or why."""

    def __init__(self, logger: logging.Logger = log) -> None:
        self._log = logger

    def _line(self, level: int, message: str, event: str, **fields: object) -> None:
        if self._log.isEnabledFor(level):  # the fields are built only for a line written
            self._log.log(level, message, extra={"event": event, **fields})

    def transitions_committed(self, taken: Sequence[tuple[str, str]]) -> None:
        edges = [f"{machine}.{edge}" for machine, edge in taken]
        self._line(logging.DEBUG, "transitions committed", "transitions", edges=edges)

    def reconnected(self, server: str) -> None:
        self._line(logging.INFO, "reconnecting", "reconnect", server=server)

    def leases_reaped(self, count: int) -> None:
        if count:
            self._line(logging.INFO, "expired leases reaped", "leases_reaped", count=count)

    def attempts_timed_out(self, count: int) -> None:
        if count:
            self._line(logging.INFO, "attempts timed out", "timed_out", count=count)

    def tasks_redispatched(self, reason: str, count: int) -> None:
        self._line(
            logging.WARNING, "ready tasks redispatched", "redispatched", reason=reason, count=count
        )

    def workers_lost_too_often(self, count: int) -> None:
        if count:
            self._line(
                logging.WARNING,
                "attempts failed: worker lost too often",
                "worker_lost",
                count=count,
            )

    def dispatches_published(self, count: int) -> None:
        self._line(logging.DEBUG, "dispatches published", "published", count=count)

    def dispatches_returned(self, count: int) -> None:
        self._line(logging.WARNING, "dispatches returned unroutable", "returned", count=count)

    def claim_skipped(self, reason: str) -> None:
        self._line(logging.DEBUG, "dispatch skipped", "claim_skipped", reason=reason)

    def handler_returned(self, task_type: str, outcome: str, seconds: float) -> None:
        self._line(
            logging.DEBUG,
            "handler returned",
            "handler_returned",
            task_type=task_type,
            outcome=outcome,
            seconds=round(seconds, 6),
        )

    def stale_finish(self) -> None:
        self._line(logging.INFO, "stale finish discarded", "stale_finish")

    def dead_lettered(self) -> None:
        self._line(logging.WARNING, "message dead-lettered", "dead_lettered")

    def heartbeat_failed(self) -> None:
        self._line(logging.WARNING, "lease renewal failed", "heartbeat_failed")
