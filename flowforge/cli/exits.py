"""The exit codes, one meaning each (``flowforge --help`` and docs/cli.md list them)."""

from __future__ import annotations

from flowforge import errors
from flowforge.cli.parser import UsageError

EXIT_OK = 0
#: The run failed, was cancelled, or did not finish in time; a rebuild found differences.
EXIT_FAILED = 1
#: Bad input: an invalid workflow, flag or setting; an unknown run, task or task type.
EXIT_BAD_INPUT = 2
#: A server (the database or the broker) is unreachable or failed.
EXIT_UNREACHABLE = 3
#: Refused by the rules: cancelling a finished run; a database of a newer schema version.
EXIT_REFUSED = 4
#: Interrupted by Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 130

#: The first matching class decides, so subclasses come before their bases.
EXIT_CODES: tuple[tuple[type[errors.FlowForgeError], int], ...] = (
    (UsageError, EXIT_BAD_INPUT),
    (errors.InvalidIdError, EXIT_BAD_INPUT),
    (errors.InvalidWorkflowDefinitionError, EXIT_BAD_INPUT),
    (errors.UnknownRunError, EXIT_BAD_INPUT),
    (errors.ArchivedRunError, EXIT_BAD_INPUT),
    (errors.ArchiveFileError, EXIT_BAD_INPUT),
    (errors.ArchiverBusyError, EXIT_REFUSED),
    (errors.UnknownTaskTypeError, EXIT_BAD_INPUT),
    (errors.ConfigurationError, EXIT_BAD_INPUT),
    (errors.IllegalTransitionError, EXIT_BAD_INPUT),
    (errors.UnknownTaskKeyError, EXIT_BAD_INPUT),
    (errors.InvalidScheduleError, EXIT_BAD_INPUT),
    (errors.UnknownScheduleError, EXIT_BAD_INPUT),
    (errors.InvalidLimitError, EXIT_BAD_INPUT),
    (errors.SchemaVersionError, EXIT_REFUSED),
    (errors.QueueTypeMismatchError, EXIT_REFUSED),
    (errors.DomainError, EXIT_REFUSED),
    (errors.PersistenceError, EXIT_UNREACHABLE),
    (errors.BrokerError, EXIT_UNREACHABLE),
)


def exit_code_for(exc: errors.FlowForgeError) -> int:
    for kind, code in EXIT_CODES:
        if isinstance(exc, kind):
            return code
    return EXIT_FAILED
