"""The error tree: one base, subtrees by kind, a docstring that says what to do."""

from __future__ import annotations

import inspect

import pytest

import flowforge
from flowforge import errors

KINDS = (
    errors.DomainError,
    errors.NotFoundError,
    errors.PersistenceError,
    errors.BrokerError,
    errors.ArchiveError,
    errors.ConfigurationError,
    errors.ProcessError,
)


def error_classes() -> list[type[errors.FlowForgeError]]:
    return [
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.FlowForgeError) and cls is not errors.FlowForgeError
    ]


@pytest.mark.parametrize("cls", error_classes(), ids=lambda cls: cls.__name__)
def test_every_error_is_of_exactly_one_kind(cls: type[errors.FlowForgeError]) -> None:
    assert [kind.__name__ for kind in KINDS if issubclass(cls, kind)] in (
        [kind.__name__] for kind in KINDS
    )


@pytest.mark.parametrize("cls", error_classes(), ids=lambda cls: cls.__name__)
def test_every_error_has_its_own_docstring_as_a_default_message(
    cls: type[errors.FlowForgeError],
) -> None:
    assert "__doc__" in vars(cls)
    assert cls.__doc__ and cls.__doc__.strip()


def test_the_default_message_is_the_docstring() -> None:
    assert str(errors.DatabaseUnavailableError()) == (
        "The database cannot be reached; check its host, port and that it is running."
    )


def test_an_unknown_run_is_not_a_persistence_error() -> None:
    assert not issubclass(errors.UnknownRunError, errors.PersistenceError)
    assert issubclass(errors.UnknownTaskRunError, errors.UnknownRunError)
    assert issubclass(errors.UnknownRunError, errors.NotFoundError)


@pytest.mark.parametrize(
    ("cls", "transient"),
    [
        (errors.DatabaseUnavailableError, True),
        (errors.TransactionConflictError, True),
        (errors.SchemaVersionError, False),
    ],
)
def test_database_errors_say_whether_retrying_can_help(
    cls: type[errors.PersistenceError], transient: bool
) -> None:
    assert issubclass(cls, errors.TransientPersistenceError) is transient
    assert issubclass(cls, errors.PermanentPersistenceError) is not transient


def test_the_public_error_names_stay_importable_from_flowforge() -> None:
    for name in (
        "BrokerUnavailableError",
        "ConfigurationError",
        "DatabaseUnavailableError",
        "FlowForgeError",
        "InvalidWorkflowDefinitionError",
        "SchemaVersionError",
        "UnknownRunError",
        "UnknownTaskRunError",
        "UnknownTaskTypeError",
    ):
        assert getattr(flowforge, name) is getattr(errors, name)
    for name in ("IllegalTransitionError", "LeaseRequiredError", "QueueTypeMismatchError"):
        assert issubclass(getattr(errors, name), errors.FlowForgeError)
