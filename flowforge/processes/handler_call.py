"""One handler invocation on another thread (a lane), so the worker can service its
connection meanwhile."""

from __future__ import annotations

import traceback
from typing import Any

from flowforge import observe
from flowforge.aggregates import json_values
from flowforge.processes import capture
from flowforge.processes.lane import Done, Lane
from flowforge.processes.registry import Handler, TaskContext


def error_details(exc: BaseException) -> dict[str, str]:
    """What the audit log records of a failure: type, message and traceback."""
    return json_values.error_details(
        {
            "type": type(exc).__name__,
            "message": str(exc),
            "traceback": "".join(traceback.format_exception(exc)),
        }
    )


class HandlerCall:
    """Runs ``handler(context)`` on a lane (the worker's, reused task after task; a new
    one if none is given) and keeps its return or exception, and its output."""

    def __init__(
        self,
        handler: Handler,
        context: TaskContext,
        lane: Lane | None = None,
        *,
        watch: observe.AttemptWatch | None = None,
    ) -> None:
        self._handler = handler
        self._context = context
        #: What watches the attempt: current while the handler runs (its span the
        #: current one, so the handler's spans nest in it).
        self._watch = watch or observe.AttemptWatch()
        self._lane = lane or Lane(f"handler-{context.task_key}")
        self._result: Any = None
        self._error: BaseException | None = None
        self._returned: Done | None = None
        #: What the handler prints and logs in its thread (``processes/capture.py``).
        self.output = capture.AttemptOutput()

    def start(self) -> None:
        self._returned = self._lane.run(self._run)

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout``; True once the handler has returned or raised."""
        assert self._returned is not None, "start() first"
        return self._returned.wait(timeout)

    def _run(self) -> None:
        try:
            with self._watch.current(), capture.capturing(self.output):
                self._result = self._handler(self._context)
        except BaseException as exc:  # noqa: BLE001 - any failure of user code fails the task
            # Drop this frame: the traceback a user reads starts in their handler.
            tb = exc.__traceback__
            self._error = exc.with_traceback(tb.tb_next if tb is not None else None)

    def outcome(self) -> tuple[Any, dict[str, str] | None]:
        """``(result, None)`` on success, ``(None, error)`` on failure.

        A result that is not JSON-serialisable fails the task: it could not be stored,
        and a downstream task could not receive it.
        """
        if self._error is not None:
            return None, error_details(self._error)
        try:
            return json_values.checked_json(self._result, "a handler's result"), None
        except ValueError as exc:
            return None, error_details(self._unstorable(exc))

    def _unstorable(self, exc: ValueError) -> TypeError:
        """Why the result cannot be stored, the cause and where it is first: the line
        ``status`` and ``why`` show is cut at 120 characters."""
        found = json_values.first_unstorable(self._result)
        where, cause = found if found is not None else ("", str(exc.__cause__ or exc))
        at = f" at result{where}" if where else ""
        return TypeError(
            f"result cannot be stored{at}: {cause} (task {self._context.task_key!r} "
            f"returned a {type(self._result).__name__}; a result must be JSON: {exc})"
        )
