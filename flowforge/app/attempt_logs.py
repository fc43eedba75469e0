"""Each attempt's captured output: stored by the worker after the attempt's outcome,
read by ``flowforge logs`` and the UI (docs/logs.md).

The output is not an event: it is not part of a task's history that the log replays
(a rebuild keeps these rows as they are) and no state depends on it. It is written in
its own transaction after the outcome's, not in it: the outcome's write stays what it
was (a batch's leaf successes in one round trip, untouched), a handler that printed
nothing adds no statement at all, and a failure to store the output costs the attempt
its log, never its outcome. The price: a worker that dies between the two writes loses
that attempt's output (its outcome is kept).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from flowforge.app.arguments import text
from flowforge.app.core import ServiceCore


@dataclass(frozen=True, slots=True)
class AttemptLogView:
    """One claim's captured output: its attempt, the claim's fencing token, the worker
    that ran it, the text kept and how many characters were dropped from its middle
    (said in the text too), and when it was stored."""

    task_run_id: UUID
    attempt: int
    fencing_token: int
    worker_id: str
    output: str
    dropped_chars: int
    written_at: datetime

    @property
    def truncated(self) -> bool:
        return self.dropped_chars > 0


def storable(output: str) -> str:
    """``output`` as any database stores it: a lone surrogate (bytes printed that were
    not UTF-8) and NUL (PostgreSQL's text refuses it) written as escapes."""
    if output.isascii() and "\x00" not in output:
        return output
    return output.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


class AttemptLogs:
    """The attempt logs' writes and reads (the module says why they stand apart)."""

    def __init__(self, core: ServiceCore) -> None:
        self._core = core

    def record_attempt_log(
        self,
        task_run_id: UUID,
        fencing_token: int,
        *,
        attempt: int,
        worker_id: str,
        output: str,
        dropped_chars: int = 0,
    ) -> None:
        """Store one claim's output (the first one stored for a claim stays); nothing
        if its task is no longer here (archived meanwhile)."""
        with self._core.writes() as writes:
            writes.attempt_logs.insert(
                task_run_id,
                fencing_token,
                attempt=attempt,
                worker_id=text(worker_id, "worker_id"),
                output=storable(output),
                dropped_chars=dropped_chars,
            )

    def attempt_logs(
        self, task_run_id: UUID, *, attempt: int | None = None
    ) -> list[AttemptLogView]:
        """The task's stored outputs in the order of their claims (``attempt``: only
        that attempt's). An attempt that printed nothing, or is still running, has
        none."""
        with self._core.reads() as reads:
            rows = reads.attempt_log_rows(task_run_id)
        views = [
            AttemptLogView(
                task_run_id=row["task_run_id"],
                attempt=int(row["attempt"]),
                fencing_token=int(row["fencing_token"]),
                worker_id=row["worker_id"],
                output=row["output"],
                dropped_chars=int(row["dropped_chars"]),
                written_at=row["written_at"],
            )
            for row in rows
        ]
        return [v for v in views if attempt is None or v.attempt == attempt]
