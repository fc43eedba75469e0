"""Each attempt's captured output (``sql/attempt_logs.sql``): stored after its outcome,
one row per claim (``app/attempt_logs.py`` decides what goes in it)."""

from __future__ import annotations

from uuid import UUID

from flowforge.projections.db.protocols import Transaction


class AttemptLogWrites:
    """The attempt logs' write in one open transaction."""

    def __init__(self, tx: Transaction) -> None:
        self._tx = tx

    def insert(
        self,
        task_run_id: UUID,
        fencing_token: int,
        *,
        attempt: int,
        worker_id: str,
        output: str,
        dropped_chars: int,
    ) -> None:
        """The claim's output, if its task is still here and none was stored for it."""
        self._tx.run(
            "insert_attempt_log",
            {
                "task_run_id": task_run_id,
                "fencing_token": fencing_token,
                "attempt": attempt,
                "worker_id": worker_id,
                "output": output,
                "dropped_chars": dropped_chars,
            },
        )
