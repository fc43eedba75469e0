"""Every error FlowForge raises, rooted at one base class.

Subtrees by kind, so that a handler catches a kind and never depends on the order of
its ``except`` clauses::

    FlowForgeError
      DomainError          a caller asked for something the rules forbid (a bug or a
                           refused command; retrying never helps)
      NotFoundError        no run or task run has that id (bad input; nothing to retry)
      PersistenceError     the database refused the operation (unclassified driver error)
        TransientPersistenceError   unreachable, or a conflict: retrying may succeed
        PermanentPersistenceError   wrong schema: retrying never helps, an operator must act
      BrokerError          RabbitMQ refused the operation (publish, declare, consume)
        BrokerUnavailableError      unreachable or connection lost: reconnect with backoff
      ArchiveError         an archive or restore could not be done (app/archive.py)
        ArchiveFileError            the file is missing, or not a whole FlowForge archive
      ConfigurationError   a setting is invalid: fix it and start again
      ProcessError         a long-running process cannot go on: its supervisor restarts it
        HandlersHungError           a worker's abandoned handlers would not return

A class's docstring is its default message; each message says what was attempted and
what to do about it. Driver errors are translated in one place per adapter
(``projections/db/errors.py`` for the databases, ``processes/rabbitmq/translate.py`` for
pika) and chained (``raise ... from exc``), so the original is never lost.

This module imports nothing but the standard library: the pure core raises these too.
"""

from __future__ import annotations


class FlowForgeError(Exception):
    """FlowForge failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or type(self).__name__).strip())


# --- domain -------------------------------------------------------------------------


class DomainError(FlowForgeError):
    """A command broke one of the execution model's rules."""


class IllegalTransitionError(DomainError):
    """The transition is not an edge of the state machine.

    This is a bug in the caller, not a lost race: it is raised before any database
    work, whether or not the row exists. Use a transition name from the machine's table
    (see ``flowforge.aggregates.machines``).
    """

    def __init__(self, machine: str, transition: str, detail: str = "") -> None:
        self.machine = machine
        self.transition = transition
        super().__init__(
            f"{transition!r} is not a transition of the {machine} state machine"
            f"{': ' + detail if detail else ''}. Use one of the edges in "
            f"flowforge.aggregates.machines; this is a bug in the caller, not a lost race."
        )


class LeaseRequiredError(DomainError):
    """The transition spends a lease and needs the claim's fencing token."""

    def __init__(self, transition: str) -> None:
        self.transition = transition
        super().__init__(
            f"{transition!r} requires the lease: call finish_task_run(task_run_id, "
            f"fencing_token, {transition!r}, ...) with the fencing token that "
            f"claim_task_run returned, not transition_task_run."
        )


class ReaperOnlyTransitionError(DomainError):
    """``reap_lease`` is reachable only through the reaper."""

    def __init__(self, transition: str = "reap_lease") -> None:
        self.transition = transition
        super().__init__(
            f"{transition!r} is reachable only through reclaim_task_run / "
            f"reap_expired_leases: only the reaper clears the lease and bumps the "
            f"fencing token in the same write."
        )


class RerunOnlyTransitionError(DomainError):
    """``carry_over`` is taken only by a rerun, in its new run's creation transaction."""

    def __init__(self, transition: str = "carry_over") -> None:
        self.transition = transition
        super().__init__(
            f"{transition!r} is taken only by rerun_workflow_run (`flowforge rerun`), "
            f"when it creates the new run: a result is carried over from a finished run "
            f"into a task that was just created, never into one that already exists."
        )


class RunNotFinishedError(DomainError):
    """The run has not finished: wait for it to end, or cancel it, then rerun it."""


class NothingToRerunError(DomainError):
    """Every task of the run succeeded: name the tasks to run again with --from."""


class IdempotencyKeyConflictError(DomainError):
    """The idempotency key names a run submitted with another workflow or other inputs:
    use a new key for a new submission, or submit exactly what the key's run had."""


class UnknownTaskKeyError(DomainError):
    """The run's workflow has no task with that key; use one of its task keys."""


class InvalidWorkflowDefinitionError(DomainError):
    """The workflow definition is invalid; fix the named field and submit it again."""


class UnknownTaskTypeError(DomainError):
    """No handler is registered for the task type; register one with @task(...)."""


class InvalidScheduleError(DomainError):
    """The cron schedule is invalid (its expression, time zone or catch-up); fix the
    named part and add it again."""


class ScheduleExistsError(DomainError):
    """A schedule of that name exists: pick another name, or delete it first."""


class InvalidLimitError(DomainError):
    """The concurrency limit is invalid: give a task type (a plain identifier) and a
    whole number N >= 1."""


class CorruptEventLogError(DomainError):
    """An event in the log does not follow from the aggregate's state.

    The log was written by something other than FlowForge's application service, or
    by an incompatible version. Do not rebuild projections from it until it is
    explained.
    """


# --- not found ----------------------------------------------------------------------


class NotFoundError(FlowForgeError):
    """Nothing has that id; check the id, or list what exists with `flowforge runs`."""


class InvalidIdError(NotFoundError):
    """That text is not an id, or names several runs; give a full id or its short form."""


class UnknownRunError(NotFoundError):
    """No workflow run or task run has that id; list runs with `flowforge runs`."""


class UnknownTaskRunError(UnknownRunError):
    """No task run has that id; list a run's tasks with `flowforge status RUN`."""


class ArchivedRunError(NotFoundError):
    """The run was archived: bring it back with `flowforge db restore FILE`."""


class UnknownScheduleError(NotFoundError):
    """No schedule has that name; list them with `flowforge schedule list`."""


# --- persistence ----------------------------------------------------------------------


class PersistenceError(FlowForgeError):
    """The database refused the operation; its message says why."""


class TransientPersistenceError(PersistenceError):
    """The database could not complete the operation now; nothing was written, and
    retrying later may succeed."""


class PermanentPersistenceError(PersistenceError):
    """The database cannot serve this FlowForge as it is; retrying never helps, an
    operator must act on the message."""


class DatabaseUnavailableError(TransientPersistenceError):
    """The database cannot be reached; check its host, port and that it is running."""


class OutcomeWriteTimedOutError(TransientPersistenceError):
    """A worker stopped waiting for an outcome's write attempt when its outcome patience
    ran out (the database did not answer in time). The outcome is kept for the
    dispatch's redelivery; the attempt may still land later, which its fencing token
    makes harmless. Check the database's reachability, or raise the patience."""


class TransactionConflictError(TransientPersistenceError):
    """The database rolled the transaction back to break a conflict; nothing was
    written, and it is safe to retry."""


class SchemaVersionError(PermanentPersistenceError):
    """The database's schema version does not match this FlowForge; migrate it, or run
    the FlowForge version that created it."""


# --- broker ---------------------------------------------------------------------------


class BrokerError(FlowForgeError):
    """RabbitMQ refused the operation; its message says what and what to do."""


class BrokerUnavailableError(BrokerError):
    """RabbitMQ cannot be reached; check FLOWFORGE_BROKER_URL and that it is running."""


class PublishNotConfirmedError(BrokerError):
    """The broker did not confirm a publish; the outbox row stays pending and is
    retried by the next sweep."""


class UnroutableDispatchError(BrokerError):
    """The broker returned a dispatch as unroutable: no queue is bound to its routing
    key. Start a worker (it declares and binds the queue) or run
    `flowforge publisher`, which declares it too; the outbox row stays pending."""


class QueueTypeMismatchError(BrokerError):
    """The dispatch queue exists with another type or arguments than FlowForge declares.

    Retrying never helps: stop the workers and the publisher, delete the queue, start a
    worker (it redeclares it as a quorum queue). The full procedure is in
    docs/delivery.md, "Migrating from a classic queue".
    """


class MalformedDispatchError(BrokerError):
    """A message on the dispatch queue is not a valid dispatch; it is dead-lettered."""


# --- configuration -------------------------------------------------------------------


class ProcessError(FlowForgeError):
    """A long-running process cannot go on and exits: its supervisor (systemd,
    Kubernetes, ...) restarts it."""


class HandlersHungError(ProcessError):
    """A worker abandoned more handlers than it may keep: each still runs on a thread of
    its own after its task's lease was lost (timed out, cancelled or reaped), and will
    not return. The worker exits so that its supervisor (systemd, Kubernetes, ...)
    starts a fresh process; find the handler that hangs (the worker's log names each
    task it abandoned) and give it a timeout of its own."""


# --- archives (`flowforge db archive` / `db restore`; docs/operations.md) -----------------


class ArchiveError(FlowForgeError):
    """The archive or restore could not be done; nothing was deleted or restored."""


class ArchiveFileError(ArchiveError):
    """The archive file cannot be used; name a file `flowforge db archive` wrote."""


class CorruptArchiveError(ArchiveFileError):
    """The archive file is damaged or truncated, and is refused; nothing was deleted or
    restored. Use an intact copy of the file."""


class ArchiverBusyError(ArchiveError):
    """Another archiver (a `flowforge db archive`, `db restore` or a scheduler's
    retention) is running on this database; wait for it to finish and try again."""


class ConfigurationError(FlowForgeError):
    """FlowForge's configuration is invalid; fix the named setting."""


# --- the schema (store) -----------------------------------------------------------------


class SchemaMigrationRequiredError(SchemaVersionError):
    """The database's schema is older than this FlowForge, or absent: run
    `flowforge db migrate` (or `flowforge db init`) first."""


class DatabaseMissingError(SchemaMigrationRequiredError):
    """The SQLite database file does not exist: create it with `flowforge db init`."""


# --- the feed (docs/feed.md) ---------------------------------------------------------


class InvalidFeedPositionError(InvalidIdError):
    """Not a feed position: give one a feed returned (``TRANSACTION.NOTIFICATION``, e.g.
    ``812.4031``), or none to start from the beginning."""


class FeedPositionArchivedError(DomainError):
    """Events after this feed position were archived: a follower resuming here would
    skip them. Restore the archive (``flowforge db restore FILE``) and resume, or start
    again from the oldest live event (no position) and rebuild what you keep from the
    archive's events."""

    def __init__(self, position: str, oldest: str, where: list[str]) -> None:
        self.position = position
        self.oldest = oldest
        self.where = where
        place = f" to {', '.join(where)}" if where else ""
        super().__init__(
            f"feed position {position} is older than the oldest event still in the log "
            f"({oldest}): the events after it were archived{place}. Restore them with "
            f"`flowforge db restore FILE` and resume from {position}, or start again "
            f"without a position (from {oldest}) and take the archived events from the "
            f"archive file"
        )
