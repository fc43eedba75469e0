"""Reading what happened: ``runs``, ``status``, ``history``, ``why``, and the web UI
(``ui``), which shows the same."""

from __future__ import annotations

from flowforge.cli import flags, history_flags
from flowforge.cli.grammar.command import Command

RUNS = Command(
    "runs",
    "list recent runs with their state and duration",
    "flowforge runs --limit 5",
    "flowforge.cli.inspect:runs",
    (flags.LIMIT, flags.JSON),
)


STATUS = Command(
    "status",
    "a run's tasks with state, attempt, duration and error",
    "flowforge status 3f2a --watch\n"
    "flowforge status 3f2a --state failed     # only its failed tasks",
    "flowforge.cli.inspect:status",
    (
        flags.RUN,
        flags.WATCH,
        flags.JSON,
        history_flags.ALL_TASKS,
        history_flags.TASK_STATE,
        history_flags.TASK_PAGE,
        history_flags.AFTER_KEY,
    ),
    description="A run's tasks with state, attempt, duration and error; a run of more "
    "than 20 tasks, a summary: its tasks counted by state, then the ones to act on "
    "(failed, running, retrying, waiting the longest). --all lists every task, --state "
    "the tasks in one state, --limit/--after a page of them in key order. Exits 1 if "
    "the run failed or was cancelled; --watch follows it until it finishes.",
)


HISTORY = Command(
    "history",
    "the audit log: every transition of every attempt",
    "flowforge history 3f2a            # a run and all its tasks\n"
    "flowforge history 3f2a/enrich     # one task run (or its id)\n"
    "flowforge history 3f2a --since 2026-01-31T12:03:00Z --limit 50",
    "flowforge.cli.inspect:history",
    (
        flags.RUN_OR_TASK_RUN,
        history_flags.HISTORY_TASK,
        history_flags.SINCE,
        history_flags.HISTORY_LIMIT,
        flags.JSON,
    ),
    description="The audit log: every transition of every attempt, in the log's order, "
    "printed as it is read (the first line comes at once, at any run size). --task, "
    "--since and --limit narrow it.",
)


WHY = Command(
    "why",
    "explain why a task is not running (or did not run)",
    """\
    flowforge why 3f2a/load
      load is waiting for 1 upstream task: enrich (retrying, attempt 2 due at 12:03:05)
    flowforge why 3f2a/load --at 2026-01-31T12:03:00Z    # as of a past moment
    """,
    "flowforge.cli.inspect:why",
    (flags.TASK_RUN, flags.AT, flags.JSON),
    description="Explain a task run's state: the upstream tasks it waits on, a retry "
    "backoff, a dispatch not yet published or claimed, the worker holding its lease, "
    "the run's end that cancelled it. --at answers from the event log as of a past "
    "moment.",
)


LOGS = Command(
    "logs",
    "what a task's handler printed and logged, attempt by attempt",
    """\
    flowforge logs 3f2a enrich
    flowforge logs 3f2a/enrich --attempt 2
    flowforge logs 3f2a enrich --follow
    """,
    "flowforge.cli.attempt_logs:logs",
    (
        history_flags.LOGS_TARGET,
        history_flags.LOGS_TASK,
        history_flags.ATTEMPT,
        history_flags.LOGS_FOLLOW,
        flags.JSON,
    ),
    description="Print each attempt's output: what its handler wrote to stdout and "
    "stderr and logged with `logging` while it ran, in its thread (docs/logs.md), "
    "stored when the attempt ended. At most 64 Ki characters an attempt (its first "
    "48 Ki and last 16 Ki; the text says what was dropped). --follow waits for the "
    "attempts still to come.",
    uses_broker=False,
)


UI = Command(
    "ui",
    "serve the web UI: runs, a run's DAG and timeline at any moment, its tasks",
    """\
    flowforge ui --port 8765
      serving FlowForge's UI on http://127.0.0.1:8765/ (Ctrl-C stops)
    """,
    "flowforge.cli.ui:serve",
    (flags.HOST, flags.PORT, flags.METRICS_PORT),
    description="Serve server-rendered pages (docs/ui.md): the runs, a run's DAG and "
    "timeline now or as of any past moment (replayed from the audit log), a task's "
    "attempts and why; cancel a run. Loopback only unless FLOWFORGE_UI_TOKEN is set: "
    "then any --host may be given and every request must carry the token.",
    log_level="INFO",
    uses_broker=False,
)


EVENTS = Command(
    "events",
    "the feed: every transition of every run, in commit order, by position",
    """\
    flowforge events --limit 3
    flowforge events --follow --after 812.4031 --json
    """,
    "flowforge.cli.events:events",
    (history_flags.FOLLOW, history_flags.AFTER, history_flags.EVENTS_LIMIT, flags.JSON),
    description="Print one transition per line (time, run, task, attempt, transition, "
    "actor, position), in the feed's order (docs/feed.md): no transition is skipped or "
    "repeated after a position. --follow keeps printing them as they commit; --after "
    "resumes after a position a line printed. --json prints one object per line.",
    uses_broker=False,
)
