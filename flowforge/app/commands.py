"""The commands that change a run or a task run.

Every command follows the one rule (docs/architecture.md): legality first, decided by the
pure core before any I/O; then one transaction holding the conditional write on the
current-state row, the event at the row's new version, and the outbox row when a task
became ready. A lost race or a stale fencing token returns ``False`` (or ``None``) and
appends nothing; it never raises.

Two rooms: :mod:`~flowforge.app.run_commands` (a run's creation, rerun, cancel, advance)
and :mod:`~flowforge.app.task_run_commands` (a task run's edges, claims, finishes,
leases); :class:`Commands` is both, as the service wires it.
"""

from __future__ import annotations

from flowforge.app.run_commands import RunCommands
from flowforge.app.task_run_commands import Finish, TaskRunCommands

__all__ = ["Commands", "Finish"]


class Commands(RunCommands, TaskRunCommands):
    """The commands that change a run or a task run (the module says how)."""
