"""The worker's settle decisions: which settlement each kind of error gets."""

from __future__ import annotations

import inspect
from collections.abc import Mapping

import pytest

from flowforge import errors
from flowforge.processes import settle
from flowforge.processes.transport import SettleAction

#: The kinds ``settle.for_error`` tells apart. They must be disjoint subtrees, or the
#: answer would depend on the order of its checks.
KINDS = (errors.MalformedDispatchError, errors.NotFoundError, errors.PersistenceError)


def error_classes() -> list[type[errors.FlowForgeError]]:
    return [
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.FlowForgeError)
    ]


@pytest.mark.parametrize("cls", error_classes(), ids=lambda cls: cls.__name__)
def test_every_error_class_belongs_to_at_most_one_kind_the_worker_settles_by(
    cls: type[errors.FlowForgeError],
) -> None:
    assert sum(issubclass(cls, kind) for kind in KINDS) <= 1


@pytest.mark.parametrize(
    "exc",
    [errors.UnknownRunError("gone"), errors.UnknownTaskRunError("gone")],
    ids=type,
)
def test_an_unknown_run_is_dead_lettered_not_requeued_as_a_database_failure(
    exc: errors.FlowForgeError,
) -> None:
    settlement = settle.for_error(exc)
    assert settlement.action == "dead_letter"
    assert not settlement.back_off
    assert settlement is not settle.DATABASE_FAILED


@pytest.mark.parametrize(
    "exc",
    [
        errors.DatabaseUnavailableError("down"),
        errors.TransactionConflictError("conflict"),
        errors.SchemaVersionError("old"),
        errors.PersistenceError("refused"),
    ],
    ids=type,
)
def test_a_database_failure_requeues_and_backs_off(exc: errors.FlowForgeError) -> None:
    settlement = settle.for_error(exc)
    assert (settlement.action, settlement.result, settlement.back_off) == (
        "requeue",
        "requeued",
        True,
    )


def test_a_malformed_dispatch_is_dead_lettered() -> None:
    settlement = settle.for_error(errors.MalformedDispatchError("not json"))
    assert (settlement.action, settlement.result) == ("dead_letter", "dead_lettered")


@pytest.mark.parametrize(
    "exc", [RuntimeError("bug"), errors.BrokerUnavailableError("lost")], ids=type
)
def test_any_other_error_requeues_without_backing_off(exc: BaseException) -> None:
    assert settle.for_error(exc) == settle.UNEXPECTED
    assert settle.UNEXPECTED.action == "requeue"


def test_a_durable_outcome_or_a_duplicate_is_acked() -> None:
    for result in ("succeed", "fail", "stale", "skipped"):
        assert settle.ack(result) == settle.Settlement("ack", result)


class RecordingDelivery:
    """A ``Delivery`` that records how it was settled."""

    body = b"{}"
    redelivered = False
    headers: Mapping[str, object] = {}

    def __init__(self) -> None:
        self.settled: list[str] = []

    def ack(self) -> None:
        self.settled.append("ack")

    def requeue(self) -> None:
        self.settled.append("requeue")

    def dead_letter(self) -> None:
        self.settled.append("dead_letter")


@pytest.mark.parametrize("action", ["ack", "requeue", "dead_letter"])
def test_perform_sends_exactly_the_action_it_is_given(action: SettleAction) -> None:
    delivery = RecordingDelivery()
    settle.perform(delivery, action)
    assert delivery.settled == [action]
