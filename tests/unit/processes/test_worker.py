"""The worker's per-delivery settle, against a stand-in application: every path
settles the delivery exactly once, in one ``finally``, whatever the order of errors."""

from __future__ import annotations

import uuid
from typing import Any, cast

import pytest

from flowforge import errors
from flowforge.aggregates.dispatch import DispatchMessage
from flowforge.app.caches import DefinitionCache
from flowforge.app.service import FlowForge
from flowforge.processes.registry import TaskRegistry
from flowforge.processes.transport import InMemoryDispatchChannel
from flowforge.processes.worker import Worker


class FailingApp:
    """An application whose every claim and read raises ``error``."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.definitions = DefinitionCache()

    def claim_task_run_and_its_run(self, task_run_id: uuid.UUID, *_: Any, **__: Any) -> Any:
        raise self.error

    def task_run_and_its_run(self, task_run_id: uuid.UUID, **_: Any) -> Any:
        raise self.error


def dispatch() -> bytes:
    return DispatchMessage(
        dispatch_id=uuid.uuid4(),
        task_run_id=uuid.uuid4(),
        task_key="only",
        task_type="work",
        fencing_token=1,
    ).encode()


def handle_one(
    error: BaseException, body: bytes | None = None
) -> tuple[str, InMemoryDispatchChannel]:
    """Deliver one message to a worker whose application raises ``error``."""
    channel = InMemoryDispatchChannel(delivery_limit=None)
    channel._append([("work", body if body is not None else dispatch(), {})])
    worker = Worker(
        cast(FlowForge, FailingApp(error)),
        channel.consumer,
        registry=TaskRegistry(),
        worker_id="w",
    )
    worker.stop.set("test")  # the back-off after a requeue returns at once
    consumer = channel.consumer()
    delivery = consumer.get(0)
    assert delivery is not None
    try:
        return worker.handle(delivery, consumer), channel
    finally:
        consumer.close()


@pytest.mark.parametrize(
    "error", [errors.UnknownRunError("gone"), errors.UnknownTaskRunError("gone")], ids=type
)
def test_an_unknown_run_is_dead_lettered_not_requeued_as_a_database_failure(
    error: errors.FlowForgeError,
) -> None:
    result, channel = handle_one(error)
    assert result == "dead_lettered"
    assert len(channel.dead_letters) == 1
    assert channel.ready_count == 0


@pytest.mark.parametrize(
    "error",
    [errors.DatabaseUnavailableError("down"), errors.TransactionConflictError("conflict")],
    ids=type,
)
def test_a_database_failure_requeues_the_message_never_acks_it(
    error: errors.FlowForgeError,
) -> None:
    result, channel = handle_one(error)
    assert result == "requeued"
    assert channel.ready_count == 1
    assert channel.dead_letters == []


def test_a_malformed_message_is_dead_lettered_without_reading_the_database() -> None:
    result, channel = handle_one(RuntimeError("never raised"), body=b"\x00not json")
    assert result == "dead_lettered"
    assert channel.dead_letters == [b"\x00not json"]


def test_an_unexpected_error_goes_on_up_after_the_settle() -> None:
    bug = RuntimeError("a bug")
    with pytest.raises(RuntimeError) as caught:
        handle_one(bug)
    assert caught.value is bug


def test_an_unexpected_error_leaves_the_message_on_the_queue_settled_once() -> None:
    channel = InMemoryDispatchChannel(delivery_limit=None)
    channel._append([("work", dispatch(), {})])
    worker = Worker(
        cast(FlowForge, FailingApp(RuntimeError("a bug"))),
        channel.consumer,
        registry=TaskRegistry(),
        worker_id="w",
    )
    consumer = channel.consumer()
    delivery = consumer.get(0)
    assert delivery is not None
    with pytest.raises(RuntimeError):
        worker.handle(delivery, consumer)
    # Settled by the worker's finally: the consumer no longer holds it, and settling it
    # again is refused.
    assert channel.unsettled_count == 0
    assert channel.ready_count == 1
    with pytest.raises(RuntimeError, match="already settled"):
        delivery.ack()
    consumer.close()
