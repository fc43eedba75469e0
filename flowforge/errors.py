"""Every error FlowForge raises, rooted at one base class.

Subtrees by kind: domain (a caller asked for something the rules forbid), persistence
(the database refused or is unreachable), broker (RabbitMQ refused or is unreachable),
configuration. A class's docstring is its default message; each message says what was
attempted and what to do about it. Driver errors are translated in one place per adapter
and chained (``raise ... from exc``), so the original is never lost.

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


class InvalidWorkflowDefinitionError(DomainError):
    """The workflow definition is invalid; fix the named field and submit it again."""


class CorruptEventLogError(DomainError):
    """An event in the log does not follow from the aggregate's state.

    The log was written by something other than FlowForge's application service, or
    by an incompatible version. Do not rebuild projections from it until it is
    explained.
    """


# --- persistence ----------------------------------------------------------------------


class PersistenceError(FlowForgeError):
    """The database refused the operation or could not be reached."""


class DatabaseUnavailableError(PersistenceError):
    """The database cannot be reached; check its host, port and that it is running."""


class TransactionConflictError(PersistenceError):
    """The database rolled the transaction back to break a conflict; nothing was
    written, and it is safe to retry."""


class SchemaVersionError(PersistenceError):
    """The database's schema version does not match this FlowForge."""


class UnknownRunError(PersistenceError):
    """No workflow run or task run has that id; list runs with `flowforge runs`."""


class UnknownTaskRunError(UnknownRunError):
    """No task run has that id; list a run's tasks with `flowforge status RUN`."""


class RunAlreadyFinishedError(DomainError):
    """The workflow run is already terminal and can no longer change."""


# --- broker ---------------------------------------------------------------------------


class BrokerError(FlowForgeError):
    """RabbitMQ refused the operation or could not be reached."""


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
    """The dispatch queue exists with another type than quorum."""


class MalformedDispatchError(BrokerError):
    """A message on the dispatch queue is not a valid dispatch; it is dead-lettered."""


# --- configuration -------------------------------------------------------------------


class ConfigurationError(FlowForgeError):
    """FlowForge's configuration is invalid; fix the named setting."""


class UnknownTaskTypeError(DomainError):
    """No handler is registered for the task type; register one with @task(...)."""


# --- the schema (store) -----------------------------------------------------------------


class SchemaMigrationRequiredError(SchemaVersionError):
    """The database's schema is older than this FlowForge, or absent: run
    `flowforge db migrate` (or `flowforge db init`) first."""


class DatabaseMissingError(SchemaMigrationRequiredError):
    """The SQLite database file does not exist: create it with `flowforge db init`."""
