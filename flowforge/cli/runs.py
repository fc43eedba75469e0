"""``flowforge submit``, ``run``, ``rerun``, ``demo`` and ``cancel``: starting and stopping
runs."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from uuid import UUID

from flowforge import bootstrap, timefmt
from flowforge.aggregates import failures
from flowforge.aggregates.definition import WorkflowDefinition
from flowforge.aggregates.ids import short_id
from flowforge.aggregates.machines import WORKFLOW_RUN_MACHINE
from flowforge.app.results import StartedRun, TaskRunView, WorkflowRunView
from flowforge.app.service import FlowForge
from flowforge.app.why import why
from flowforge.cli import common, ending, ids, mapped_lines, render, stopping
from flowforge.cli import demo as demo_workflow
from flowforge.cli.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_REFUSED
from flowforge.cli.parser import UsageError
from flowforge.cli.progress import Progress
from flowforge.cli.waiting import Waiting
from flowforge.config import Settings
from flowforge.processes.registry import TaskRegistry, default_registry


def submit(args: argparse.Namespace) -> int:
    # Validate everything the user typed before touching the database.
    definition = common.load_workflow(args.workflow)
    inputs = common.parse_inputs(args.input)
    if args.start_at is not None and args.start_in is not None:
        raise UsageError("give --at TIME or --in DURATION, not both")
    start_at = args.start_at if args.start_at is not None else args.start_in
    settings = common.settings_from(args)
    with common.open_app(settings) as app:
        # A broker that refuses the credentials fails the submit before its run exists.
        unreachable = _broker_not_refusing(settings, app.deployment_id)
        started = app.submit_workflow_run(
            definition, inputs, idempotency_key=args.idempotency_key, start_at=start_at
        )
        run = app.get_workflow_run(started.run_id)
    if args.json:
        print(render.to_json(_submitted(started, run)))
    else:
        print(started.run_id)
    _announce(started, run, definition, args.idempotency_key, show_id=False)
    if unreachable is not None:
        print(
            f"note: the run's dispatches wait in the outbox until the broker is back: "
            f"{unreachable}",
            file=sys.stderr,
        )
    if started.created and (note := render.start_note(run, datetime.now(UTC))):
        print(f"note: run {run.id} {note}", file=sys.stderr)
    if settings.embedded and not WORKFLOW_RUN_MACHINE.is_terminal(run.run_state):
        # No worker can reach a run without a broker: say what will run it.
        print(f"note: {embedded_runner_hint(args, run.id, definition)}", file=sys.stderr)
    return 0


def _broker_not_refusing(settings: Settings, deployment: str) -> str | None:
    """A broker that refuses the credentials or vhost fails the submit now, with its
    reason (the run would never be dispatched); one unreachable now does not (the
    outbox keeps its dispatches): why, for a note. None: embedded, or accepted."""
    if settings.broker is None:
        return None
    from flowforge.processes import rabbitmq  # noqa: PLC0415 - pika only with a broker

    return rabbitmq.check_not_refused(settings.broker.for_deployment(deployment))


def embedded_runner_hint(
    args: argparse.Namespace, run_id: UUID, definition: WorkflowDefinition
) -> str:
    """What runs a run when no broker is configured: only `flowforge run`, in its own
    process (scheduler, publisher and workers as threads)."""
    types = ", ".join(sorted({t.type for t in definition.tasks}))
    return (
        f"no broker is configured, so no worker process will run this run's tasks; "
        f"run it in this process with `{resume_command(args, run_id, ['MODULE'])}`, "
        f"MODULE being the module of the @task handlers for {types} (or set "
        f"FLOWFORGE_BROKER_URL and start `flowforge scheduler`, `publisher` and `worker`)"
    )


def resume_command(args: argparse.Namespace, run_id: UUID, modules: Sequence[str]) -> str:
    """The exact `flowforge run --resume` that runs ``run_id`` to the end, here."""
    tasks = "".join(f" --tasks {shlex.quote(m)}" for m in modules)
    return f"{common.program(args)} run --resume {run_id}{tasks}"


def _submitted(started: StartedRun, run: WorkflowRunView) -> dict[str, object]:
    return {
        "run_id": started.run_id,
        "created": started.created,
        "workflow": run.workflow_name,
        "state": run.state,
        "idempotency_key": run.idempotency_key,
        "start_at": run.start_at,
    }


def _announce(
    started: StartedRun,
    run: WorkflowRunView,
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
    if args.resume:
        return _resume(args)
    if not args.workflow:
        raise UsageError("give a workflow to run (FILE or module:attr), or --resume RUN")
    definition = common.load_workflow(args.workflow)
    # The workers of this process run every task: refuse what they cannot run now,
    # rather than submit a run whose tasks would fail one by one.
    common.check_task_types(definition, default_registry)
    inputs = common.parse_inputs(args.input)
    settings = common.settings_from(args)
    with common.open_app(settings, migrate=True) as app:
        common.serve_metrics(args, app, backlog=True)
        transport = bootstrap.transport_for(settings, app.deployment_id)
        started = app.submit_workflow_run(definition, inputs, idempotency_key=args.idempotency_key)
        run_row = app.get_workflow_run(started.run_id)
        _announce(started, run_row, definition, args.idempotency_key, show_id=True)
        final, stopped_by = drive(
            app,
            transport,
            started.run_id,
            args.workers,
            default_registry,
            args.timeout,
            args.grace,
            every_run=args.all,
        )
        return report_outcome(app, final, stopped_by, args.timeout, _rerun_hint(args, final))


def _resume(args: argparse.Namespace) -> int:
    """``run --resume RUN``: run an existing run here to the end, submitting nothing."""
    if args.workflow or args.input or args.idempotency_key:
        raise UsageError(
            "--resume runs an existing run: give no workflow, --input or --idempotency-key"
        )
    settings = common.settings_from(args)
    with common.open_app(settings) as app:
        common.serve_metrics(args, app, backlog=True)
        run_row = ids.resolve_run(app, args.resume)
        definition = WorkflowDefinition.model_validate(run_row.definition)
        common.check_task_types(definition, default_registry)
        transport = bootstrap.transport_for(settings, app.deployment_id)
        print(f"resuming run {run_row.id} of {run_row.workflow_name} ({run_row.state})")
        final, stopped_by = drive(
            app,
            transport,
            run_row.id,
            args.workers,
            default_registry,
            args.timeout,
            args.grace,
            every_run=args.all,
        )
        return report_outcome(app, final, stopped_by, args.timeout, _rerun_hint(args, final))


def _rerun_hint(args: argparse.Namespace, run: WorkflowRunView) -> str:
    """What finishes a run this process left unfinished."""
    if not common.settings_from(args).embedded:
        return (
            f"the deployment's scheduler, publisher and workers finish it "
            f"(`flowforge status {run.id} --watch` follows it), as does "
            f"`{resume_command(args, run.id, common.handler_modules(args))}`"
        )
    return f"`{resume_command(args, run.id, common.handler_modules(args))}` finishes it"


def drive(
    app: FlowForge,
    transport: bootstrap.Transport,
    run_id: UUID,
    workers: int,
    registry: TaskRegistry,
    timeout: float | None,
    grace: float,
    *,
    every_run: bool = False,
) -> tuple[WorkflowRunView, str]:
    """Run scheduler, publisher and workers here until the run ends, a stop signal, or
    the timeout (see :mod:`flowforge.cli.stopping`); the run as the database then holds
    it, and what stopped the wait early ('timeout', 'SIGINT', 'SIGTERM'; '' if the run
    ended).

    They run this run only, leaving every other run in the database as it is; with
    ``every_run`` (``--all``), every run whose task types all have a handler in
    ``registry`` too."""
    runs = None if every_run else [run_id]
    group = bootstrap.embedded(app, transport, workers=workers, registry=registry, runs=runs)
    progress = Progress(sys.stdout)
    waiting = Waiting(lambda task_run_id: why(app, task_run_id))

    def show(snapshot: WorkflowRunView) -> None:
        tasks = app.task_runs(run_id)
        progress.update(snapshot, tasks, waiting.update(snapshot, tasks))

    with stopping.Interrupts(group.stop) as interrupts:
        group.start()
        try:
            run = group.wait_for(run_id, timeout=timeout, on_progress=show)
        finally:
            stopped_by = _stop_cause(group, run_id)
            if stopped_by:
                _announce_stop(app, run_id, stopped_by, grace)
            abandoned = group.shutdown(grace=grace, hurry=interrupts.hurry)
    if abandoned:
        ending.abandoned_threads()
        how = "at once (asked again)" if interrupts.hurry.is_set() else f"after {grace:g}s"
        print(
            f"stopped {how}, abandoning the task in hand of {', '.join(abandoned)}",
            file=sys.stderr,
        )
    if not WORKFLOW_RUN_MACHINE.is_terminal(run.run_state):
        # The scheduler stopped with the others: one last pass over this run, so the
        # state printed is the one the finished tasks imply, as a scheduler would write.
        app.advance_workflow_run(run_id)
    final = app.get_workflow_run(run_id)
    progress.update(final, app.task_runs(run_id))
    return final, stopped_by


def _stop_cause(group: bootstrap.ProcessGroup, run_id: UUID) -> str:
    if group.stop.is_set():
        return group.stop.reason
    terminal = WORKFLOW_RUN_MACHINE.is_terminal(group.app.get_workflow_run(run_id).run_state)
    return "" if terminal else "timeout"


def _announce_stop(app: FlowForge, run_id: UUID, cause: str, grace: float) -> None:
    running = [t.task_key for t in app.task_runs(run_id) if t.state == "running"]
    now = "Ctrl-C to stop now" if cause == "timeout" else "press Ctrl-C again to stop now"
    waiting = (
        f"; waiting up to {grace:g}s for {', '.join(running)} to finish ({now})" if running else ""
    )
    print(f"stopping ({cause}){waiting}", file=sys.stderr)


def summary_counts(tasks: Sequence[TaskRunView]) -> str:
    """``5 tasks, 6 attempts``: a task a rerun carried over ran no attempt here (its
    row's attempt is 1, its result another run's); ``, 2 carried over`` says how many."""
    carried = sum(t.carried_from_run_id is not None for t in tasks)
    attempts = sum(t.attempt for t in tasks if t.carried_from_run_id is None)
    words = f"{count(len(tasks), 'task')}, {count(attempts, 'attempt')}"
    return f"{words}, {carried} carried over" if carried else words


def count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def report_outcome(
    app: FlowForge, run: WorkflowRunView, stopped_by: str, timeout: float | None, rerun: str
) -> int:
    """Say how the run stands in the database, and exit accordingly."""
    took = render.took(run, datetime.now(UTC))
    tasks = render.task_order(run, app.task_runs(run.id))
    short = short_id(run.id)
    if run.state == "succeeded":
        print(f"run {short} succeeded in {took}: {summary_counts(tasks)}")
        return 0
    if WORKFLOW_RUN_MACHINE.is_terminal(run.run_state):
        print(f"run {short} {run.state} after {took}", file=sys.stderr)
        for task in tasks:
            if task.state == "failed":
                print(
                    f"  {task.task_key} failed after {task.attempt} attempt(s): "
                    f"{render.error_line(task.error)}",
                    file=sys.stderr,
                )
                for frame in failures.last_frames(task.error):
                    print(f"    at {frame}", file=sys.stderr)
        return EXIT_FAILED
    why = f"did not finish within {timeout:g}s" if stopped_by == "timeout" else "was stopped"
    print(
        f"run {run.id} {why} ({stopped_by}); in the database it is still {run.state}: "
        f"{render.counts(tasks)}",
        file=sys.stderr,
    )
    for task in tasks:
        if task.state == "running":
            print(
                f"  {task.task_key} was left running on {task.lease_owner}: its lease "
                f"expires at {timefmt.iso(task.lease_expires_at)}, then a scheduler's "
                f"reaper makes it ready and it runs again",
                file=sys.stderr,
            )
    print(f"  {rerun}, or `flowforge cancel {run.id}` cancels it", file=sys.stderr)
    return EXIT_FAILED if stopped_by == "timeout" else EXIT_INTERRUPTED


def demo(args: argparse.Namespace) -> int:
    # The demo's run stays where the next command finds it: the configured database, or
    # the embedded default that `flowforge runs` reads.
    settings = common.settings_from(args)
    with common.open_app(settings, migrate=True) as app:
        print(
            f"demo: workflow {demo_workflow.DEFINITION.name} on {app.database.dialect} "
            f"{app.database.location}, with in-process dispatch"
        )
        started = app.submit_workflow_run(demo_workflow.DEFINITION, demo_workflow.INPUTS)
        final, stopped_by = drive(
            app,
            bootstrap.transport_for(settings, app.deployment_id, in_process=True),
            started.run_id,
            args.workers,
            demo_workflow.REGISTRY,
            None,
            args.grace,
        )
        # The demo's handlers are its own (no --tasks module names them), and a demo
        # runs only its own run: nothing but a cancel ends this one.
        again = "it stays unfinished (a new `flowforge demo` starts a new run)"
        code = report_outcome(app, final, stopped_by, None, again)
        print("\nhistory (the audit log):")
        entries = app.run_history(started.run_id)
        for line in render.history_lines(entries):
            print(line)
        print(f"\ninspect it (the run stays in {app.database.location}):")
    for line in render.inspect_commands(started.run_id, common.program(args), "enrich"):
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
            f"error: run {target.id} already {after.state}; a finished run never "
            f"changes, so there is nothing to cancel",
            file=sys.stderr,
        )
        return EXIT_REFUSED
    print(f"cancelled run {target.id} ({after.workflow_name}): {render.counts(tasks)}")
    return 0


def rerun(args: argparse.Namespace) -> int:
    """``rerun RUN``: a new run of a finished run, carrying over the results that need
    not be produced again; run here to the end as ``run --resume`` does, or only
    created (``--detach``)."""
    common.import_task_modules(args.tasks, default_registry)
    settings = common.settings_from(args)
    with common.open_app(settings) as app:
        old = ids.resolve_run(app, args.run)
        if not args.detach:
            # As for `run --resume`: every task type needs a handler here, carried-over
            # ones included, because this process's runner covers only the runs it can
            # run whole (bootstrap.ProcessGroup); refused before the new run exists.
            common.check_task_types(app.definitions.of(old), default_registry)
        started = app.rerun_workflow_run(
            old.id, from_tasks=args.from_tasks, idempotency_key=args.idempotency_key
        )
        new = app.get_workflow_run(started.run_id)
        tasks = app.task_runs(new.id)
        if args.detach:
            print(new.id)
            _announce_rerun(old, new, started, tasks, args.idempotency_key)
            _follow_hint(args, new)
            return 0
        _announce_rerun(old, new, started, tasks, args.idempotency_key)
        transport = bootstrap.transport_for(settings, app.deployment_id)
        final, stopped_by = drive(
            app, transport, new.id, args.workers, default_registry, args.timeout, args.grace
        )
        return report_outcome(app, final, stopped_by, args.timeout, _rerun_hint(args, final))


def _announce_rerun(
    old: WorkflowRunView,
    new: WorkflowRunView,
    started: StartedRun,
    tasks: Sequence[TaskRunView],
    key: str | None,
) -> None:
    """Say on stderr what the rerun carries over and what runs again, so stdout stays
    the bare id under --detach."""
    if not started.created:
        print(
            f"note: a run with idempotency key {key!r} already exists: {new.id}, "
            f"{new.state}; returned it and created nothing",
            file=sys.stderr,
        )
        return
    ordered = render.task_order(new, tasks)
    # A mapped task's elements grouped (mapped_lines): 10,000 keys are no sentence.
    carried = mapped_lines.grouped_keys([t for t in ordered if t.carried_from_run_id])
    again = mapped_lines.grouped_keys([t for t in ordered if t.carried_from_run_id is None])
    print(f"rerun of run {old.id} ({old.state}): new run {new.id}", file=sys.stderr)
    print(f"  carried over: {carried or 'nothing'}", file=sys.stderr)
    print(f"  running again: {again}{mapped_lines.unexpanded(new, ordered)}", file=sys.stderr)


def _follow_hint(args: argparse.Namespace, run: WorkflowRunView) -> None:
    """What runs a detached rerun, and how to follow it."""
    if common.settings_from(args).embedded:
        definition = WorkflowDefinition.model_validate(run.definition)
        print(f"note: {embedded_runner_hint(args, run.id, definition)}", file=sys.stderr)
        return
    print(
        f"the deployment's workers run it; follow it with "
        f"`{common.program(args)} status {run.id} --watch`",
        file=sys.stderr,
    )
