"""``flowforge submit``, ``run``, ``demo`` and ``cancel``: starting and stopping runs."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from datetime import UTC, datetime
from uuid import UUID

from flowforge.aggregates.definition import WorkflowDefinition
from flowforge.aggregates.machines import WORKFLOW_RUN_MACHINE
from flowforge.app.results import StartedRun
from flowforge.app.service import FlowForge
from flowforge.cli import common, ids, processes, render
from flowforge.cli import demo as demo_workflow
from flowforge.cli.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_REFUSED
from flowforge.cli.progress import Progress
from flowforge.processes.registry import TaskRegistry, default_registry
from flowforge.processes.runner import ProcessGroup, Transport
from flowforge.projections.tables import WorkflowRunRow

#: What stops `run` and `demo` cleanly (the default SIGTERM would kill them mid-task).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def submit(args: argparse.Namespace) -> int:
    # Validate everything the user typed before touching the database.
    definition = common.load_workflow(args.workflow)
    inputs = common.parse_inputs(args.input)
    with common.open_app(common.settings_from(args)) as app:
        started = app.submit_workflow_run(definition, inputs, idempotency_key=args.idempotency_key)
        run = app.get_workflow_run(started.run_id)
    if args.json:
        print(render.to_json(_submitted(started, run)))
    else:
        print(started.run_id)
    _announce(started, run, definition, args.idempotency_key, show_id=False)
    return 0


def _submitted(started: StartedRun, run: WorkflowRunRow) -> dict[str, object]:
    return {
        "run_id": started.run_id,
        "created": started.created,
        "workflow": run.workflow_name,
        "state": run.state,
        "idempotency_key": run.idempotency_key,
    }


def _announce(
    started: StartedRun,
    run: WorkflowRunRow,
    definition: WorkflowDefinition,
    key: str | None,
    *,
    show_id: bool,
) -> None:
    """Say on stderr what happened, so stdout stays the bare id for scripts."""
    if started.created:
        if show_id:
            print(f"submitted run {run.id} of {run.workflow_name}", file=sys.stderr)
        return
    other = (
        f" (of workflow {run.workflow_name!r}, not {definition.name!r})"
        if run.workflow_name != definition.name
        else ""
    )
    print(
        f"note: a run with idempotency key {key!r} already exists: {run.id}{other}, "
        f"{run.state}; returned it and created nothing",
        file=sys.stderr,
    )


def run(args: argparse.Namespace) -> int:
    common.import_task_modules(args.tasks, default_registry)
    definition = common.load_workflow(args.workflow)
    # The workers of this process run every task: refuse what they cannot run now,
    # rather than submit a run whose tasks would fail one by one.
    common.check_task_types(definition, default_registry)
    inputs = common.parse_inputs(args.input)
    settings = common.settings_from(args)
    with common.open_app(settings) as app:
        transport = processes.transport_for(settings)
        started = app.submit_workflow_run(definition, inputs, idempotency_key=args.idempotency_key)
        run_row = app.get_workflow_run(started.run_id)
        _announce(started, run_row, definition, args.idempotency_key, show_id=True)
        final, stopped_by = drive(
            app, transport, started.run_id, args.workers, default_registry, args.timeout
        )
        return report_outcome(app, final, stopped_by, args.timeout)


def drive(
    app: FlowForge,
    transport: Transport,
    run_id: UUID,
    workers: int,
    registry: TaskRegistry,
    timeout: float | None,
) -> tuple[WorkflowRunRow, str]:
    """Run scheduler, publisher and workers here until the run ends; the last snapshot
    and what stopped the wait early ('' if nothing did)."""
    group = ProcessGroup(app, transport, workers=workers, registry=registry)
    progress = Progress(sys.stdout)
    # The group's threads cannot install signal handlers; without these, Ctrl-C would
    # kill the process with its workers mid-task instead of stopping them cleanly.
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    group.stop.install_signal_handlers()
    try:
        with group:
            group.wait_for(
                run_id,
                timeout=timeout,
                on_progress=lambda snapshot: progress.update(snapshot, app.task_runs(run_id)),
            )
            stopped_by = group.stop.reason if group.stop.is_set() else ""
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    final = app.get_workflow_run(run_id)
    progress.update(final, app.task_runs(run_id))
    return final, stopped_by


def report_outcome(
    app: FlowForge, run: WorkflowRunRow, stopped_by: str, timeout: float | None
) -> int:
    elapsed = render.span(run.created_at, run.finished_at, datetime.now(UTC))
    if run.state == "succeeded":
        tasks = app.task_runs(run.id)
        attempts = sum(t.attempt for t in tasks)
        print(f"run {run.id} succeeded in {elapsed} ({len(tasks)} tasks, {attempts} attempts)")
        return 0
    if stopped_by in ("SIGINT", "SIGTERM"):
        print(
            f"stopped by {stopped_by}; run {run.id} is still {run.state}: cancel it with "
            f"`flowforge cancel {run.id}`, or let processes finish it",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    if not WORKFLOW_RUN_MACHINE.is_terminal(run.run_state):
        print(
            f"run {run.id} did not finish within {timeout}s; it is still {run.state}: "
            f"see `flowforge status {run.id}`, or cancel it with `flowforge cancel {run.id}`",
            file=sys.stderr,
        )
        return EXIT_FAILED
    print(f"run {run.id} {run.state} after {elapsed}", file=sys.stderr)
    for task in render.task_order(run, app.task_runs(run.id)):
        if task.state == "failed":
            print(
                f"  {task.task_key} failed after {task.attempt} attempt(s): "
                f"{render.error_line(task.error)}",
                file=sys.stderr,
            )
    return EXIT_FAILED


def demo(args: argparse.Namespace) -> int:
    # The demo's run stays where the next command finds it: the configured database, or
    # the embedded default that `flowforge runs` reads.
    settings = common.settings_from(args)
    with common.open_app(settings) as app:
        print(
            f"demo: workflow {demo_workflow.DEFINITION.name} on {app.database.dialect} "
            f"{app.database.location}, with in-process dispatch"
        )
        started = app.submit_workflow_run(demo_workflow.DEFINITION, demo_workflow.INPUTS)
        final, stopped_by = drive(
            app,
            Transport.in_memory(),
            started.run_id,
            args.workers,
            demo_workflow.REGISTRY,
            None,
        )
        code = report_outcome(app, final, stopped_by, None)
        print("\nhistory (the audit log):")
        entries = app.run_history(started.run_id)
        for line in render.table(render.HISTORY_HEADERS, render.history_rows(entries)):
            print(f"  {line}")
        print(f"\ninspect it (the run stays in {app.database.location}):")
    # A --database-url flag must be repeated for the next command to find the run; an
    # environment variable or the default is found again as it is.
    program = "flowforge"
    if args.database_url:
        program += f" --database-url {shlex.quote(args.database_url)}"
    for line in render.inspect_commands(started.run_id, program, "enrich"):
        print(f"  {line}")
    return code


def cancel(args: argparse.Namespace) -> int:
    with common.open_app(common.settings_from(args)) as app:
        target = ids.resolve_run(app, args.run)
        cancelled = app.cancel_workflow_run(target.id)
        after = app.get_workflow_run(target.id)
        tasks = app.task_runs(target.id)
    if not cancelled:
        print(
            f"error: run {target.id} finished as {after.state} before the cancel; a "
            f"finished run never changes",
            file=sys.stderr,
        )
        return EXIT_REFUSED
    print(f"cancelled run {target.id} ({after.workflow_name}): {render.counts(tasks)}")
    return 0
