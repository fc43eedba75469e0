"""The in-process dispatch channel: the broker's semantics without a broker."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from flowforge import errors
from flowforge.aggregates.dispatch import DispatchMessage, decode_dispatch
from flowforge.processes import transport
from flowforge.processes.transport import InMemoryDispatchChannel

NO_WAIT = 0.0
#: The one task type of ``dispatch``.
TYPES = ("http_get",)


def dispatch(task_key: str = "extract", task_type: str = "http_get") -> DispatchMessage:
    return DispatchMessage(
        dispatch_id=uuid.uuid4(),
        task_run_id=uuid.uuid4(),
        task_key=task_key,
        task_type=task_type,
        fencing_token=1,
    )


def published(channel: InMemoryDispatchChannel, count: int) -> list[DispatchMessage]:
    messages = [dispatch(f"task-{i}") for i in range(count)]
    channel.publisher().publish(messages)
    return messages


def test_the_publisher_consumer_and_delivery_satisfy_the_transport_protocols() -> None:
    channel = InMemoryDispatchChannel()
    published(channel, 1)
    consumer = channel.consumer(task_types=TYPES)
    assert isinstance(channel.publisher(), transport.DispatchPublisher)
    assert isinstance(consumer, transport.DispatchConsumer)
    assert isinstance(consumer.get(NO_WAIT), transport.Delivery)


def test_a_published_message_is_delivered_with_its_encoded_body() -> None:
    channel = InMemoryDispatchChannel()
    [message] = published(channel, 1)
    delivery = channel.consumer(task_types=TYPES).get(NO_WAIT)
    assert delivery is not None
    assert delivery.body == message.encode()
    assert decode_dispatch(delivery.body) == message
    assert delivery.redelivered is False


def test_messages_are_delivered_in_publish_order() -> None:
    channel = InMemoryDispatchChannel()
    messages = published(channel, 5)
    consumer = channel.consumer(task_types=TYPES)
    bodies = []
    for _ in messages:
        delivery = consumer.get(NO_WAIT)
        assert delivery is not None
        bodies.append(delivery.body)
        delivery.ack()
    assert bodies == [message.encode() for message in messages]


def test_get_returns_none_when_nothing_arrives_within_the_timeout() -> None:
    assert InMemoryDispatchChannel().consumer(task_types=TYPES).get(0.01) is None


def test_a_consumer_holds_at_most_one_unsettled_delivery() -> None:
    channel = InMemoryDispatchChannel()
    published(channel, 3)
    first_consumer, second_consumer = (
        channel.consumer(task_types=TYPES),
        channel.consumer(task_types=TYPES),
    )

    held = first_consumer.get(NO_WAIT)
    assert held is not None
    assert first_consumer.get(0.01) is None
    other = second_consumer.get(NO_WAIT)
    assert other is not None
    assert other.body != held.body
    assert (channel.ready_count, channel.unsettled_count) == (1, 2)

    held.ack()
    assert first_consumer.get(NO_WAIT) is not None


def test_a_consumer_with_a_prefetch_holds_that_many_and_takes_more_as_it_settles() -> None:
    channel = InMemoryDispatchChannel()
    messages = published(channel, 4)
    consumer = channel.consumer(prefetch=3, task_types=TYPES)
    held = [consumer.get(NO_WAIT) for _ in range(3)]
    assert [d.body if d else None for d in held] == [m.encode() for m in messages[:3]]
    assert consumer.get(0.01) is None
    assert (channel.ready_count, channel.unsettled_count) == (1, 3)
    held[1].ack()  # type: ignore[union-attr]
    fourth = consumer.get(NO_WAIT)
    assert fourth is not None and fourth.body == messages[3].encode()


def test_closing_a_consumer_returns_every_delivery_it_held() -> None:
    channel = InMemoryDispatchChannel()
    messages = published(channel, 3)
    consumer = channel.consumer(prefetch=3, task_types=TYPES)
    held = [consumer.get(NO_WAIT) for _ in range(3)]
    held[0].ack()  # type: ignore[union-attr]
    consumer.close()
    again = [channel.consumer(prefetch=3, task_types=TYPES).get(NO_WAIT) for _ in range(2)]
    assert {d.body for d in again if d and d.redelivered} == {m.encode() for m in messages[1:]}
    assert (channel.ready_count, channel.unsettled_count) == (0, 2)


@pytest.mark.parametrize("prefetch", [0, -1, 1_001, 2.5, True])
def test_a_prefetch_that_is_not_a_whole_number_from_1_to_the_batch_limit_is_refused(
    prefetch: object,
) -> None:
    with pytest.raises(ValueError, match="prefetch must be"):
        InMemoryDispatchChannel().consumer(prefetch=prefetch, task_types=TYPES)  # type: ignore[arg-type]


def test_an_acked_message_is_gone() -> None:
    channel = InMemoryDispatchChannel()
    published(channel, 1)
    consumer = channel.consumer(task_types=TYPES)
    delivery = consumer.get(NO_WAIT)
    assert delivery is not None
    delivery.ack()
    assert consumer.get(0.01) is None
    assert (channel.ready_count, channel.unsettled_count, channel.dead_letters) == (0, 0, [])


def test_a_requeued_message_is_delivered_again_marked_redelivered() -> None:
    channel = InMemoryDispatchChannel()
    [message] = published(channel, 1)
    consumer = channel.consumer(task_types=TYPES)
    first = consumer.get(NO_WAIT)
    assert first is not None
    first.requeue()
    again = consumer.get(NO_WAIT)
    assert again is not None
    assert again.body == message.encode()
    assert again.redelivered is True


def test_a_requeued_message_goes_behind_the_messages_already_waiting() -> None:
    channel = InMemoryDispatchChannel()
    _, second_message = published(channel, 2)
    consumer = channel.consumer(task_types=TYPES)
    first = consumer.get(NO_WAIT)
    assert first is not None
    first.requeue()
    after = consumer.get(NO_WAIT)
    assert after is not None
    assert after.body == second_message.encode()


def test_a_dead_lettered_message_moves_to_the_dead_letters_and_is_not_delivered_again() -> None:
    channel = InMemoryDispatchChannel()
    [message] = published(channel, 1)
    consumer = channel.consumer(task_types=TYPES)
    delivery = consumer.get(NO_WAIT)
    assert delivery is not None
    delivery.dead_letter()
    assert channel.dead_letters == [message.encode()]
    assert consumer.get(0.01) is None


def test_the_dead_letters_list_is_a_copy_the_caller_cannot_corrupt() -> None:
    channel = InMemoryDispatchChannel()
    published(channel, 1)
    delivery = channel.consumer(task_types=TYPES).get(NO_WAIT)
    assert delivery is not None
    delivery.dead_letter()
    channel.dead_letters.clear()
    assert len(channel.dead_letters) == 1


@pytest.mark.parametrize("second", ["ack", "requeue", "dead_letter"])
def test_settling_a_delivery_twice_raises(second: str) -> None:
    channel = InMemoryDispatchChannel()
    published(channel, 2)
    delivery = channel.consumer(task_types=TYPES).get(NO_WAIT)
    assert delivery is not None
    delivery.ack()
    with pytest.raises(RuntimeError, match="already settled"):
        getattr(delivery, second)()
    assert (channel.ready_count, channel.dead_letters) == (1, [])


def test_closing_a_consumer_returns_its_unsettled_delivery_marked_redelivered() -> None:
    channel = InMemoryDispatchChannel()
    [message] = published(channel, 1)
    consumer = channel.consumer(task_types=TYPES)
    assert consumer.get(NO_WAIT) is not None
    consumer.close()
    again = channel.consumer(task_types=TYPES).get(NO_WAIT)
    assert again is not None
    assert again.body == message.encode()
    assert again.redelivered is True


def test_a_delivery_cannot_be_settled_after_its_consumer_closed() -> None:
    channel = InMemoryDispatchChannel()
    published(channel, 1)
    consumer = channel.consumer(task_types=TYPES)
    delivery = consumer.get(NO_WAIT)
    assert delivery is not None
    consumer.close()
    with pytest.raises(errors.BrokerUnavailableError, match="delivered again"):
        delivery.ack()
    assert channel.ready_count == 1


def test_a_message_returned_more_often_than_the_delivery_limit_is_dead_lettered() -> None:
    channel = InMemoryDispatchChannel(delivery_limit=2)
    [message] = published(channel, 1)
    consumer = channel.consumer(task_types=TYPES)
    for _ in range(3):
        delivery = consumer.get(NO_WAIT)
        assert delivery is not None
        delivery.requeue()
    assert consumer.get(0.01) is None
    assert channel.dead_letters == [message.encode()]


def test_without_a_delivery_limit_a_message_can_be_requeued_indefinitely() -> None:
    channel = InMemoryDispatchChannel(delivery_limit=None)
    published(channel, 1)
    consumer = channel.consumer(task_types=TYPES)
    for _ in range(100):
        delivery = consumer.get(NO_WAIT)
        assert delivery is not None
        delivery.requeue()
    assert channel.ready_count == 1


def test_the_delivery_limit_must_be_at_least_one() -> None:
    with pytest.raises(ValueError, match="delivery_limit"):
        InMemoryDispatchChannel(delivery_limit=0)


def test_a_waiting_get_returns_as_soon_as_another_thread_publishes() -> None:
    channel = InMemoryDispatchChannel()
    consumer = channel.consumer(task_types=TYPES)
    ready = threading.Barrier(2)

    def publish_later() -> None:
        ready.wait()
        channel.publisher().publish([dispatch()])

    publisher = threading.Thread(target=publish_later)
    publisher.start()
    ready.wait()
    started = time.monotonic()
    delivery = consumer.get(timeout=10.0)
    publisher.join()
    assert delivery is not None
    assert time.monotonic() - started < 5.0


def test_concurrent_consumers_receive_every_message_exactly_once() -> None:
    channel = InMemoryDispatchChannel()
    messages = published(channel, 400)
    received: list[bytes] = []
    lock = threading.Lock()
    start = threading.Barrier(4)

    def consume() -> None:
        consumer = channel.consumer(task_types=TYPES)
        start.wait()
        while (delivery := consumer.get(0.05)) is not None:
            with lock:
                received.append(delivery.body)
            delivery.ack()

    threads = [threading.Thread(target=consume) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(received) == sorted(message.encode() for message in messages)
    assert (channel.ready_count, channel.unsettled_count) == (0, 0)


def test_pump_returns_after_about_the_given_time() -> None:
    started = time.monotonic()
    InMemoryDispatchChannel().consumer(task_types=TYPES).pump(0.02)
    assert time.monotonic() - started >= 0.02


# --- routing ------------------------------------------------------------------------------


def test_a_consumer_receives_only_the_dispatches_of_its_task_types() -> None:
    channel = InMemoryDispatchChannel()
    channel.publisher().publish([dispatch("a", "extract"), dispatch("b", "train")])
    consumer = channel.consumer(task_types=["extract"])
    delivery = consumer.get(NO_WAIT)
    assert delivery is not None and decode_dispatch(delivery.body).task_key == "a"
    delivery.ack()
    assert consumer.get(NO_WAIT) is None
    # The other type's dispatch waits, untouched, for a consumer of its own.
    assert channel.ready_count_of("train") == 1
    trainer = channel.consumer(task_types=["train"]).get(NO_WAIT)
    assert trainer is not None and decode_dispatch(trainer.body).task_key == "b"


def test_a_consumer_of_several_types_takes_the_oldest_dispatch_first() -> None:
    channel = InMemoryDispatchChannel()
    channel.publisher().publish(
        [dispatch("1", "load"), dispatch("2", "extract"), dispatch("3", "load")]
    )
    consumer = channel.consumer(prefetch=3, task_types=["extract", "load"])
    keys = []
    while (delivery := consumer.get(NO_WAIT)) is not None:
        keys.append(decode_dispatch(delivery.body).task_key)
    assert keys == ["1", "2", "3"]


def test_the_prefetch_holds_for_the_consumer_whatever_its_types() -> None:
    """One unsettled delivery at most (prefetch 1) for a consumer of two types, as the
    RabbitMQ consumer of several types (basic.get only while it holds fewer)."""
    channel = InMemoryDispatchChannel()
    channel.publisher().publish([dispatch(f"e{i}", "extract") for i in range(2)])
    channel.publisher().publish([dispatch(f"l{i}", "load") for i in range(2)])
    consumer = channel.consumer(task_types=["extract", "load"])
    held = [consumer.get(NO_WAIT) for _ in range(2)]
    assert held[0] is not None and decode_dispatch(held[0].body).task_key == "e0"
    assert held[1] is None
    assert channel.unsettled_count == 1
    held[0].ack()
    after = consumer.get(NO_WAIT)
    assert after is not None and decode_dispatch(after.body).task_key == "e1"


@pytest.mark.parametrize("task_types", [[], "extract"])
def test_a_consumer_without_task_types_is_refused(task_types: list[str] | str) -> None:
    with pytest.raises(errors.ConfigurationError, match="needs the task types it runs"):
        InMemoryDispatchChannel().consumer(task_types=task_types)
