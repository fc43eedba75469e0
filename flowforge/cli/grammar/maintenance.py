"""Maintenance: the commands of actions ``db``, ``broker``, ``schedule`` and ``limit``
(their handlers: ``flowforge/cli/db.py``, ``broker.py``, ``cron_schedules.py``,
``concurrency_limits.py``)."""

from __future__ import annotations

from flowforge.cli import flags, history_flags
from flowforge.cli.grammar.command import Command, Group

# The schema version a database gets from this FlowForge: the help's examples name it.
from flowforge.projections.migration_files import SCHEMA_VERSION

DB_ACTIONS = (
    Command(
        "init",
        "create the tables or apply missing migrations (idempotent)",
        "flowforge db init\n  database sqlite .flowforge/flowforge.db: schema version "
        f"{SCHEMA_VERSION}, deployment 3f2a6c1e0b9d",
        "flowforge.cli.db:init",
    ),
    Command(
        "migrate",
        "apply the migrations the database lacks (the same as init; idempotent)",
        "flowforge db migrate\n  database postgres 127.0.0.1:5432/flowforge: schema version "
        f"{SCHEMA_VERSION}",
        "flowforge.cli.db:migrate",
    ),
    Command(
        "rebuild",
        "rebuild the tables from the event log, then verify every row against the log",
        """\
        flowforge db rebuild
          rebuilt 12 workflow runs and 60 task runs from 431 events
          verified 72 rows against the log: all match
        """,
        "flowforge.cli.db:rebuild",
    ),
    Command(
        "archive",
        "move the runs that ended before a cutoff to an archive file (verified first)",
        """\
        flowforge db archive --finished-before 30d --to 2026-12.ffarchive
          archived 1200 runs (36420 events) to 2026-12.ffarchive in 1.9s; the file
          holds 1200 runs, 36420 events
        """,
        "flowforge.cli.archive:archive",
        (history_flags.FINISHED_BEFORE, history_flags.ARCHIVE_TO),
        description="Move every run that ended longer ago than AGE (by the database's "
        "clock), with its tasks, events, dispatches and limit bookkeeping, into FILE: a "
        "zip with a manifest of counts and SHA-256 checksums, events in the event "
        "library's stored form. The file is read back and checked before anything is "
        "deleted; the deletes go in batches, one transaction each. Live runs are never "
        "touched. Given a FILE that exists, finishes that archive (idempotent). "
        "docs/operations.md.",
    ),
    Command(
        "restore",
        "bring back the runs of an archive file (idempotent)",
        """\
        flowforge db restore 2026-12.ffarchive
          restored 1200 runs (36420 events) from 2026-12.ffarchive in 2.4s
        """,
        "flowforge.cli.archive:restore",
        (history_flags.ARCHIVE_FILE,),
        description="Check FILE whole (a damaged or truncated file is refused and nothing "
        "is restored), then put back every run of it that is not live, byte for byte, "
        "in batches of one transaction each. docs/operations.md.",
    ),
    Command(
        "stats",
        "the live database's size: events, bytes per event, rows per table, archives",
        "flowforge db stats",
        "flowforge.cli.archive:stats",
        (flags.JSON,),
    ),
)


BROKER_ACTIONS = (
    Command(
        "migrate",
        "move the dispatches of the single queue of an older FlowForge to their types' "
        "queues (idempotent)",
        """\
        flowforge broker migrate
          moved 3 dispatches to flowforge.3f2a6c1e0b9d.tasks.extract
          deleted flowforge.3f2a6c1e0b9d.tasks: the migration is complete
        """,
        "flowforge.cli.broker:migrate",
    ),
)


SCHEDULE_ACTIONS = (
    Command(
        "add",
        "add a schedule: a run of the workflow at each fire time",
        """\
        flowforge schedule add nightly --cron "30 2 * * *" --timezone Europe/Paris \\
            examples/fan_out.toml --input rows=8
          schedule nightly: fan_out at 30 2 * * * (Europe/Paris), next 2026-01-31 02:30:00 CET
        """,
        "flowforge.cli.cron_schedules:add",
        (
            flags.SCHEDULE_NAME,
            flags.CRON,
            flags.TIMEZONE,
            flags.CATCH_UP,
            flags.WORKFLOW,
            flags.INPUT,
            flags.JSON,
        ),
        description="Add a schedule: at each fire time of --cron in --timezone (DST "
        "included), the scheduler starts a run of the workflow with the --input values, "
        "exactly once. After a scheduler downtime it runs the latest missed fire time "
        "once, and the N newest older ones with --catch-up N.",
    ),
    Command(
        "list",
        "the schedules: state, cron, next fire, last fire and its run",
        "flowforge schedule list",
        "flowforge.cli.cron_schedules:list_schedules",
        (flags.JSON,),
    ),
    Command(
        "pause",
        "stop firing a schedule until it is resumed",
        "flowforge schedule pause nightly",
        "flowforge.cli.cron_schedules:pause",
        (flags.SCHEDULE_NAME,),
    ),
    Command(
        "resume",
        "fire a paused schedule again, from its next fire time after now",
        "flowforge schedule resume nightly",
        "flowforge.cli.cron_schedules:resume",
        (flags.SCHEDULE_NAME,),
    ),
    Command(
        "delete",
        "delete a schedule for good (its name may be used again)",
        "flowforge schedule delete nightly",
        "flowforge.cli.cron_schedules:delete",
        (flags.SCHEDULE_NAME,),
    ),
)


LIMIT_ACTIONS = (
    Command(
        "set",
        "at most N tasks of TYPE run at once",
        "flowforge limit set extract 2\n  at most 2 extract tasks run at once",
        "flowforge.cli.concurrency_limits:set_limit",
        (flags.TASK_TYPE, flags.MAX_RUNNING),
    ),
    Command(
        "unset",
        "remove the limit on TYPE (tasks' own max_running still apply)",
        "flowforge limit unset extract",
        "flowforge.cli.concurrency_limits:unset_limit",
        (flags.TASK_TYPE,),
    ),
    Command(
        "list",
        "every limited task type, its limit and how many of its tasks run",
        "flowforge limit list\n  TYPE     LIMIT  RUNNING  CHANGED               BY",
        "flowforge.cli.concurrency_limits:list_limits",
        (flags.JSON,),
    ),
)


#: In the order ``flowforge --help`` lists them, before the other commands.
GROUPS = (
    Group(
        "db",
        "create, migrate, rebuild, archive or restore the database",
        "Database maintenance. Only db init / db migrate (and run, demo) change the schema; "
        "every other command checks its version.",
        DB_ACTIONS,
    ),
    Group(
        "broker",
        "upgrade the broker's queues",
        "Broker maintenance: `broker migrate` moves the dispatches of the one queue of a "
        "FlowForge before routing to their task types' queues (docs/deployment.md, "
        "'Upgrading to per-type queues').",
        BROKER_ACTIONS,
    ),
    Group(
        "schedule",
        "start a workflow on a cron schedule",
        "Cron schedules: each fire time of the expression, in its time zone, starts a run "
        "of the workflow, exactly once, even with several schedulers. A deployment's "
        "`flowforge scheduler` fires them (docs/scheduling/cron.md).",
        SCHEDULE_ACTIONS,
    ),
    Group(
        "limit",
        "set, unset or list concurrency limits on task types",
        "Concurrency limits: at most N tasks of a type run at once, from the next claim "
        "on (docs/scheduling/limits.md). Each change is recorded in the audit log.",
        LIMIT_ACTIONS,
    ),
)
