"""Starting and stopping runs: ``submit``, ``run``, ``rerun``, ``demo`` and ``cancel``
(their handlers: ``flowforge/cli/runs.py``)."""

from __future__ import annotations

from dataclasses import replace

from flowforge.cli import flags
from flowforge.cli.grammar.command import Command

SUBMIT = Command(
    "submit",
    "validate a workflow and start a run; prints the run id",
    """\
    flowforge submit examples/fan_out.toml --input rows=8 --idempotency-key nightly-01
      3f2a6c1e-...
    flowforge submit examples/fan_out.toml --in 10m     # or --at 2026-01-31T12:00Z
    """,
    "flowforge.cli.runs:submit",
    (
        flags.WORKFLOW,
        flags.INPUT,
        flags.IDEMPOTENCY_KEY,
        flags.START_AT,
        flags.START_IN,
        flags.JSON,
    ),
    description="Validate a workflow (a .toml/.json file or module:attr) and start a "
    "run. With --idempotency-key, a second submit returns the first run instead of "
    "creating another. Processes (flowforge scheduler/publisher/worker) run it. With "
    "--at or --in the run stays pending, none of its tasks dispatched, until its "
    "start time by the database's clock (a TIME without an offset is this machine's "
    "local time).",
)


RUN = Command(
    "run",
    "submit a workflow and run it here to the end, with live progress",
    """\
    flowforge run examples/fan_out.toml --tasks examples.tasks --workers 3 --input rows=8
    """,
    "flowforge.cli.runs:run",
    (
        flags.RESUME,
        replace(flags.WORKFLOW, nargs="?"),
        flags.WORKERS,
        flags.TASKS,
        flags.INPUT,
        flags.IDEMPOTENCY_KEY,
        flags.TIMEOUT,
        flags.GRACE,
        flags.ALL_RUNS,
        flags.METRICS_PORT,
    ),
    description="Submit a workflow and run the scheduler, the publisher and N workers "
    "in this process until the run finishes (--resume RUN: run an existing run "
    "instead). Dispatch is in-process unless a broker is configured. Only this run is "
    "run; other runs in the database are left alone (--all: also every other run "
    "whose task types all have a handler here). Exits 0 "
    "if the run succeeded, 1 with the failed tasks' errors. --timeout or a first "
    "Ctrl-C stops, letting the tasks in hand finish for up to --grace seconds; a "
    "second Ctrl-C stops at once.",
)


RERUN = Command(
    "rerun",
    "start a new run of a finished run, carrying over what succeeded",
    """\
    flowforge rerun 3f2a --tasks examples.tasks              # what did not succeed
    flowforge rerun 3f2a --from enrich --tasks examples.tasks  # enrich and after
    """,
    "flowforge.cli.runs:rerun",
    (
        flags.RUN,
        flags.FROM_TASKS,
        flags.TASKS,
        flags.DETACH,
        flags.WORKERS,
        flags.IDEMPOTENCY_KEY,
        flags.TIMEOUT,
        flags.GRACE,
    ),
    description="Start a new run of a finished run's workflow and inputs, linked to "
    "it. A task that succeeded is not run again (its result is carried over, and the "
    "audit log says from which run, task run and attempt) unless it is named with "
    "--from or is downstream of one; every other task runs again. Then run it here "
    "to the end, as `run --resume` does (same output and exit codes), or only "
    "create it with --detach.",
)


DEMO = Command(
    "demo",
    "run the example fan-out/fan-in DAG end to end, then show its history",
    "flowforge demo",
    "flowforge.cli.runs:demo",
    (flags.WORKERS, flags.GRACE),
    description="Run the example DAG (extract -> clean, enrich, score -> load; enrich "
    "fails once and succeeds on retry) with in-process dispatch, then print its "
    "history and the commands that inspect it. The run stays in the database (the "
    "embedded default .flowforge/flowforge.db unless FLOWFORGE_DATABASE_URL is set), "
    "where `flowforge runs` finds it.",
    uses_broker=False,  # the demo always dispatches in-process
)


CANCEL = Command(
    "cancel",
    "cancel a pending or running run and its unfinished tasks",
    "flowforge cancel 3f2a",
    "flowforge.cli.runs:cancel",
    (flags.RUN,),
)
