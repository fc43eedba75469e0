"""The RabbitMQ transport against a real broker, and its pure helpers.

Every broker test declares its own exchanges and queues (uuid-suffixed names) and
deletes them afterwards, so tests never see each other's messages. The tests at the top
need no broker.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from flowforge import errors
from flowforge.aggregates.dispatch import DispatchMessage, decode_dispatch
from flowforge.config import BrokerConfig
from flowforge.processes import rabbitmq, transport
from tests import servers, topology
from tests.helpers import rabbitmqctl, wait_until

#: How long a test waits for something the broker does asynchronously (dead-lettering,
#: restarting). Polling stops as soon as it happens; the bound only ends a broken test.
DEADLINE_S = 30.0
#: How long a test waits to be sure that nothing arrives.
QUIET_S = 0.5
#: ``get`` without waiting: connects and starts consuming, returns what is already in.
NO_WAIT = 0.0
#: The task type of ``dispatch``: its queue is ``config.queue_for(TYPE)``.
TYPE = "http_get"


def dispatch(task_key: str = "extract", fencing_token: int = 1) -> DispatchMessage:
    return DispatchMessage(
        dispatch_id=uuid.uuid4(),
        task_run_id=uuid.uuid4(),
        task_key=task_key,
        task_type=TYPE,
        fencing_token=fencing_token,
    )


# --- against the broker ---------------------------------------------------------------


@pytest.fixture
def config() -> Iterator[BrokerConfig]:
    """A topology of this test's own, deleted afterwards."""
    with topology.own_topology("test") as config:
        yield config


class Admin:
    """A plain channel for looking at the broker behind the transport's back."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.connection = rabbitmq.connect(config, name="flowforge-test-admin")
        self.channel = self.connection.channel()

    def ready_count(self, queue: str) -> int:
        declared = self.channel.queue_declare(queue, passive=True)
        return int(declared.method.message_count or 0)

    def take(self, queue: str) -> tuple[Any, bytes] | None:
        """One message off ``queue`` (acked), as (properties, body), or None."""
        method, properties, body = self.channel.basic_get(queue, auto_ack=True)
        if method is None:
            return None
        assert isinstance(body, bytes)
        return properties, body

    def close(self) -> None:
        if self.connection.is_open:
            self.connection.close()


@pytest.fixture
def admin(config: BrokerConfig) -> Iterator[Admin]:
    admin = Admin(config)
    yield admin
    admin.close()


@pytest.fixture
def publisher(config: BrokerConfig) -> Iterator[rabbitmq.RabbitDispatchPublisher]:
    publisher = rabbitmq.RabbitDispatchPublisher(config)
    yield publisher
    publisher.close()


@pytest.fixture
def consumers(config: BrokerConfig) -> Iterator[Callable[[], rabbitmq.RabbitDispatchConsumer]]:
    """Makes consumers on the test's queue; closes them all afterwards."""
    made: list[rabbitmq.RabbitDispatchConsumer] = []

    def make() -> rabbitmq.RabbitDispatchConsumer:
        consumer = rabbitmq.RabbitDispatchConsumer(config, task_types=[TYPE])
        made.append(consumer)
        return consumer

    yield make
    for consumer in made:
        consumer.close()


def test_the_rabbitmq_publisher_consumer_and_delivery_satisfy_the_transport_protocols(
    publisher: rabbitmq.RabbitDispatchPublisher,
    consumers: Callable[[], rabbitmq.RabbitDispatchConsumer],
) -> None:
    consumer = consumers()
    publisher.publish([dispatch()])
    assert isinstance(publisher, transport.DispatchPublisher)
    assert isinstance(consumer, transport.DispatchConsumer)
    assert isinstance(consumer.get(DEADLINE_S), transport.Delivery)


def test_a_confirmed_dispatch_is_on_the_bound_queue_with_the_exact_payload(
    config: BrokerConfig, publisher: rabbitmq.RabbitDispatchPublisher, admin: Admin
) -> None:
    message = dispatch("load", fencing_token=4)
    publisher.publish([message])

    taken = admin.take(config.queue_for(TYPE))
    assert taken is not None
    properties, body = taken
    assert body == message.encode()
    assert decode_dispatch(body) == message
    assert properties.delivery_mode == 2
    assert properties.content_type == "application/json"
    assert properties.message_id == str(message.dispatch_id)


def test_a_batch_of_two_thousand_dispatches_is_confirmed_and_queued_in_order(
    config: BrokerConfig, publisher: rabbitmq.RabbitDispatchPublisher, admin: Admin
) -> None:
    messages = [dispatch(f"task-{i}", fencing_token=i) for i in range(2000)]
    started = time.monotonic()
    publisher.publish(messages[:1000])
    publisher.publish(messages[1000:])  # tags continue across batches on one channel
    # Generous: ~0.1 s here. It catches a confirm wait that runs to its time limit.
    assert time.monotonic() - started < rabbitmq.PUBLISH_CONFIRM_TIMEOUT_S / 3

    assert admin.ready_count(config.queue_for(TYPE)) == 2000
    bodies = []
    while (taken := admin.take(config.queue_for(TYPE))) is not None:
        bodies.append(taken[1])
    assert bodies == [message.encode() for message in messages]


def test_publishing_nothing_does_not_connect() -> None:
    unreachable = BrokerConfig(url="amqp://guest:guest@127.0.0.1:1/%2F")
    rabbitmq.RabbitDispatchPublisher(unreachable).publish([])


def test_an_unroutable_publish_raises_unroutable_dispatch_error(
    config: BrokerConfig, admin: Admin
) -> None:
    publisher = rabbitmq.RabbitDispatchPublisher(config, declare_queue=False)
    message = dispatch()
    try:
        with pytest.raises(errors.UnroutableDispatchError) as caught:
            publisher.publish([dispatch(), message])
        assert str(message.dispatch_id) in str(caught.value)
        assert config.exchange in str(caught.value)
        # The channel survives: the next publish is reported the same way, not as an outage.
        with pytest.raises(errors.UnroutableDispatchError):
            publisher.publish([dispatch()])
    finally:
        publisher.close()


def test_a_publish_the_broker_refuses_raises_publish_not_confirmed_error(
    config: BrokerConfig, admin: Admin
) -> None:
    # A queue that takes nothing: the broker nacks every message routed to it.
    admin.channel.exchange_declare(config.exchange, durable=True)
    admin.channel.queue_declare(
        config.queue_for(TYPE),
        durable=True,
        arguments={"x-max-length": 0, "x-overflow": "reject-publish"},
    )
    admin.channel.queue_bind(
        config.queue_for(TYPE), config.exchange, routing_key=config.queue_for(TYPE)
    )
    publisher = rabbitmq.RabbitDispatchPublisher(config, declare_queue=False)
    try:
        with pytest.raises(errors.PublishNotConfirmedError, match="nacked"):
            publisher.publish([dispatch()])
    finally:
        publisher.close()


def test_a_publish_to_a_closed_port_raises_broker_unavailable_naming_host_and_port() -> None:
    unreachable = BrokerConfig(url="amqp://guest:guest@127.0.0.1:1/%2F")
    publisher = rabbitmq.RabbitDispatchPublisher(unreachable)
    with pytest.raises(errors.BrokerUnavailableError) as caught:
        publisher.publish([dispatch()])
    assert "127.0.0.1:1 " in str(caught.value)
    assert isinstance(caught.value.__cause__, Exception)


def test_a_consumer_on_a_closed_port_raises_broker_unavailable_naming_host_and_port() -> None:
    unreachable = BrokerConfig(url="amqp://guest:guest@127.0.0.1:1/%2F")
    with pytest.raises(errors.BrokerUnavailableError, match=r"127\.0\.0\.1:1 "):
        rabbitmq.RabbitDispatchConsumer(unreachable, task_types=[TYPE]).get(QUIET_S)


def test_a_node_that_refuses_is_skipped_for_the_next_node_of_the_url(
    config: BrokerConfig, admin: Admin
) -> None:
    # The first "node" is a closed port (a dead node); the second is the real broker.
    cluster = config.model_copy(update={"url": f"amqp://guest:guest@127.0.0.1:1/%2F,{config.url}"})
    publisher = rabbitmq.RabbitDispatchPublisher(cluster)
    try:
        publisher.publish([dispatch()])
    finally:
        publisher.close()
    assert admin.ready_count(config.queue_for(TYPE)) == 1


def test_when_every_node_refuses_the_error_names_each_host_and_port() -> None:
    unreachable = BrokerConfig(url="amqp://guest:guest@127.0.0.1:1/%2F,amqp://127.0.0.1:2/%2F")
    with pytest.raises(errors.BrokerUnavailableError, match=r"127\.0\.0\.1:1,127\.0\.0\.1:2 "):
        rabbitmq.RabbitDispatchConsumer(unreachable, task_types=[TYPE]).get(QUIET_S)


def test_wrong_credentials_raise_broker_unavailable_pointing_at_the_password(
    config: BrokerConfig,
) -> None:
    url = f"amqp://guest:hunter2@{servers.RABBITMQ_HOST}:{servers.RABBITMQ_PORT}/%2F"
    wrong = config.model_copy(update={"url": url})
    with pytest.raises(errors.BrokerUnavailableError, match="password") as caught:
        rabbitmq.connect(wrong)
    assert "hunter2" not in str(caught.value)


def test_a_classic_queue_of_the_same_name_raises_queue_type_mismatch_with_the_migration(
    config: BrokerConfig, admin: Admin
) -> None:
    admin.channel.queue_declare(
        config.queue_for(TYPE), durable=True
    )  # classic, as an old release did
    channel = admin.connection.channel()

    with pytest.raises(errors.QueueTypeMismatchError) as caught:
        rabbitmq.declare_dispatch_queue(channel, config, [TYPE])

    message = str(caught.value)
    assert "PRECONDITION_FAILED" in message
    steps = [
        "1. Stop the worker and the publisher",
        "2. Wait for the queue to drain, or accept the loss of unacked dispatches",
        "the outbox still holds every row that was not confirmed",
        "recovered by the lease reaper",
        f"3. Delete the queue: rabbitmqctl delete_queue {config.queue_for(TYPE)}",
        "4. Start the worker. It redeclares the queue as a quorum queue",
        "5. Start the publisher",
    ]
    for step in steps:
        assert step in message


def test_the_worker_does_not_retry_a_queue_type_mismatch(
    config: BrokerConfig,
    admin: Admin,
    consumers: Callable[[], rabbitmq.RabbitDispatchConsumer],
) -> None:
    admin.channel.queue_declare(config.queue_for(TYPE), durable=True)
    consumer = consumers()
    for _ in range(2):
        with pytest.raises(errors.QueueTypeMismatchError, match=config.queue_for(TYPE)):
            consumer.get(QUIET_S)


def queue_types() -> dict[str, str]:
    listed = json.loads(rabbitmqctl("list_queues", "-q", "name", "type", "--formatter", "json"))
    return {queue["name"]: queue["type"] for queue in listed}


def test_the_declared_dispatch_and_dead_letter_queues_are_quorum_queues(
    config: BrokerConfig, admin: Admin
) -> None:
    rabbitmq.declare_dispatch_queue(admin.channel, config, [TYPE])
    rabbitmq.declare_dispatch_queue(admin.channel, config, [TYPE])  # idempotent

    types = queue_types()
    assert types[config.queue_for(TYPE)] == "quorum"
    assert types[config.dead_letter_queue] == "quorum"


def test_a_consumer_holds_at_most_one_unacked_delivery(
    publisher: rabbitmq.RabbitDispatchPublisher,
    consumers: Callable[[], rabbitmq.RabbitDispatchConsumer],
) -> None:
    first_consumer, second_consumer = consumers(), consumers()
    first_consumer.get(NO_WAIT)  # starts consuming before anything is published
    second_consumer.get(NO_WAIT)
    messages = [dispatch(f"task-{i}") for i in range(3)]
    publisher.publish(messages)

    held = first_consumer.get(DEADLINE_S)
    assert held is not None
    assert first_consumer.get(QUIET_S) is None

    others = []
    for _ in range(2):
        delivery = second_consumer.get(DEADLINE_S)
        assert delivery is not None
        others.append(delivery.body)
        delivery.ack()
    assert sorted([held.body, *others]) == sorted(m.encode() for m in messages)
    held.ack()


def test_a_requeued_delivery_is_redelivered_with_redelivered_set(
    publisher: rabbitmq.RabbitDispatchPublisher,
    consumers: Callable[[], rabbitmq.RabbitDispatchConsumer],
) -> None:
    consumer = consumers()
    message = dispatch()
    publisher.publish([message])
    first = consumer.get(DEADLINE_S)
    assert first is not None
    assert first.redelivered is False

    first.requeue()
    again = consumer.get(DEADLINE_S)
    assert again is not None
    assert again.body == message.encode()
    assert again.redelivered is True
    again.ack()


def test_an_unacked_delivery_is_redelivered_after_its_consumer_closes(
    publisher: rabbitmq.RabbitDispatchPublisher,
    consumers: Callable[[], rabbitmq.RabbitDispatchConsumer],
) -> None:
    crashed = consumers()
    message = dispatch()
    publisher.publish([message])
    held = crashed.get(DEADLINE_S)
    assert held is not None
    crashed.close()

    with pytest.raises(errors.BrokerUnavailableError, match="deliver the message again"):
        held.ack()
    again = consumers().get(DEADLINE_S)
    assert again is not None
    assert again.body == message.encode()
    assert again.redelivered is True
    again.ack()


def test_settling_a_delivery_twice_raises(
    publisher: rabbitmq.RabbitDispatchPublisher,
    consumers: Callable[[], rabbitmq.RabbitDispatchConsumer],
) -> None:
    consumer = consumers()
    publisher.publish([dispatch()])
    delivery = consumer.get(DEADLINE_S)
    assert delivery is not None
    delivery.ack()
    with pytest.raises(RuntimeError, match="already settled"):
        delivery.requeue()


@pytest.fixture
def batching(config: BrokerConfig) -> Iterator[Callable[[int], rabbitmq.RabbitDispatchConsumer]]:
    """Makes consumers of a prefetch of their own that count the ``basic.ack`` calls
    they send; closes them all afterwards."""
    made: list[rabbitmq.RabbitDispatchConsumer] = []

    def make(prefetch: int) -> rabbitmq.RabbitDispatchConsumer:
        made.append(
            counting_acks(
                rabbitmq.RabbitDispatchConsumer(config, prefetch=prefetch, task_types=[TYPE])
            )
        )
        return made[-1]

    yield make
    for consumer in made:
        consumer.close()


def counting_acks(consumer: rabbitmq.RabbitDispatchConsumer) -> rabbitmq.RabbitDispatchConsumer:
    """The consumer, its channel's ``basic_ack`` wrapped to record each call (every call
    still reaches RabbitMQ)."""
    # Connects and starts consuming; a get would take a delivery the test never sees.
    _, channel = consumer._open()
    send = channel.basic_ack
    consumer.acks_sent = []  # type: ignore[attr-defined]

    def counted(delivery_tag: int = 0, multiple: bool = False) -> None:
        consumer.acks_sent.append((delivery_tag, multiple))  # type: ignore[attr-defined]
        send(delivery_tag, multiple)

    channel.basic_ack = counted  # type: ignore[method-assign]
    return consumer


def take(consumer: rabbitmq.RabbitDispatchConsumer, n: int) -> list[transport.Delivery]:
    deliveries: list[transport.Delivery] = []
    for _ in range(n):
        delivery = consumer.get(DEADLINE_S)
        assert delivery is not None
        deliveries.append(delivery)
    return deliveries


def test_ack_all_of_every_held_delivery_is_one_multiple_ack_that_leaves_later_ones_held(
    batching: Callable[[int], rabbitmq.RabbitDispatchConsumer],
    publisher: rabbitmq.RabbitDispatchPublisher,
) -> None:
    consumer = batching(5)
    messages = [dispatch(f"task-{i}") for i in range(5)]
    publisher.publish(messages)
    batch = take(consumer, 3)

    # The two later deliveries have arrived (prefetch 5) but are not in the batch.
    def arrived() -> bool:
        consumer.pump(0.05)
        return len(consumer._inbox) == 2

    wait_until(arrived, DEADLINE_S, "the two later deliveries never arrived")
    consumer.ack_all(batch)
    assert consumer.acks_sent == [(3, True)]  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match="already settled"):
        batch[0].requeue()
    consumer.close()  # the two later ones were never acked: the broker redelivers them
    again = take(batching(2), 2)
    assert [d.body for d in again] == [m.encode() for m in messages[3:]]
    assert all(d.redelivered for d in again)
    for delivery in again:
        delivery.ack()


def test_ack_all_acks_each_when_an_earlier_delivery_is_still_held(
    batching: Callable[[int], rabbitmq.RabbitDispatchConsumer],
    publisher: rabbitmq.RabbitDispatchPublisher,
    consumers: Callable[[], rabbitmq.RabbitDispatchConsumer],
) -> None:
    consumer = batching(3)
    messages = [dispatch(f"task-{i}") for i in range(3)]
    publisher.publish(messages)
    first, *rest = take(consumer, 3)
    consumer.ack_all(rest)  # a multiple ack of tag 3 would ack the first one too
    assert consumer.acks_sent == [(2, False), (3, False)]  # type: ignore[attr-defined]
    consumer.close()
    (again,) = take(consumers(), 1)
    assert again.body == first.body == messages[0].encode()
    assert again.redelivered
    again.ack()


def test_a_batch_with_one_dead_lettered_settles_it_alone_and_acks_the_rest_in_one_call(
    batching: Callable[[int], rabbitmq.RabbitDispatchConsumer],
    publisher: rabbitmq.RabbitDispatchPublisher,
    admin: Admin,
) -> None:
    # The worker's order for a batch: the others first, then the acks together.
    consumer = batching(3)
    messages = [dispatch(f"task-{i}") for i in range(3)]
    publisher.publish(messages)
    first, poison, last = take(consumer, 3)
    poison.dead_letter()
    consumer.ack_all([first, last])
    assert consumer.acks_sent == [(3, True)]  # type: ignore[attr-defined]
    _, body = dead_letter(admin)
    assert body == messages[1].encode()
    consumer.close()  # nothing left unsettled: nothing comes back
    assert batching(3).get(QUIET_S) is None
    assert admin.ready_count(admin.config.queue_for(TYPE)) == 0


def test_ack_all_of_a_settled_delivery_raises_and_sends_nothing_for_it(
    batching: Callable[[int], rabbitmq.RabbitDispatchConsumer],
    publisher: rabbitmq.RabbitDispatchPublisher,
) -> None:
    consumer = batching(2)
    publisher.publish([dispatch("a"), dispatch("b")])
    first, second = take(consumer, 2)
    first.requeue()
    with pytest.raises(RuntimeError, match="already settled"):
        consumer.ack_all([first, second])
    assert consumer.acks_sent == []  # type: ignore[attr-defined]


def test_ack_all_of_deliveries_from_a_dropped_connection_raises_broker_unavailable(
    batching: Callable[[int], rabbitmq.RabbitDispatchConsumer],
    publisher: rabbitmq.RabbitDispatchPublisher,
) -> None:
    consumer = batching(2)
    messages = [dispatch("a"), dispatch("b")]
    publisher.publish(messages)
    batch = take(consumer, 2)
    consumer.close()
    with pytest.raises(errors.BrokerUnavailableError, match="deliver the message again"):
        consumer.ack_all(batch)
    assert consumer.acks_sent == []  # type: ignore[attr-defined]
    again = take(batching(2), 2)
    assert sorted(d.body for d in again) == sorted(m.encode() for m in messages)
    for delivery in again:
        delivery.ack()


def dead_letter(admin: Admin) -> tuple[Any, bytes]:
    return wait_until(
        lambda: admin.take(admin.config.dead_letter_queue),
        DEADLINE_S,
        "a message on the dead-letter queue",
    )


def test_a_dead_lettered_delivery_lands_on_the_dead_letter_queue_intact(
    config: BrokerConfig,
    publisher: rabbitmq.RabbitDispatchPublisher,
    consumers: Callable[[], rabbitmq.RabbitDispatchConsumer],
    admin: Admin,
) -> None:
    consumer = consumers()
    message = dispatch()
    publisher.publish([message])
    delivery = consumer.get(DEADLINE_S)
    assert delivery is not None

    delivery.dead_letter()

    properties, body = dead_letter(admin)
    assert body == message.encode()
    assert properties.headers["x-first-death-reason"] == "rejected"
    assert properties.message_id == str(message.dispatch_id)
    assert consumer.get(QUIET_S) is None
    assert admin.ready_count(config.queue_for(TYPE)) == 0


def test_a_message_that_keeps_killing_its_consumer_is_dead_lettered_at_the_delivery_limit(
    config: BrokerConfig, admin: Admin
) -> None:
    limited = config.model_copy(update={"delivery_limit": 2})
    publisher = rabbitmq.RabbitDispatchPublisher(limited)
    message = dispatch()
    try:
        publisher.publish([message])
    finally:
        publisher.close()

    deliveries = 0
    while True:
        consumer = rabbitmq.RabbitDispatchConsumer(limited, task_types=[TYPE])
        try:
            if consumer.get(QUIET_S if deliveries > limited.delivery_limit else DEADLINE_S):
                deliveries += 1
            else:
                break
        finally:
            consumer.close()  # the worker "crashes" holding the message
        assert deliveries <= limited.delivery_limit + 1, "the poison message loops forever"

    assert deliveries == limited.delivery_limit + 1
    properties, body = dead_letter(admin)
    assert body == message.encode()
    assert properties.headers["x-first-death-reason"] == "delivery_limit"


def test_a_consumer_recovers_when_its_queue_is_deleted_under_it(
    config: BrokerConfig,
    publisher: rabbitmq.RabbitDispatchPublisher,
    consumers: Callable[[], rabbitmq.RabbitDispatchConsumer],
    admin: Admin,
) -> None:
    consumer = consumers()
    assert consumer.get(NO_WAIT) is None
    admin.channel.queue_delete(config.queue_for(TYPE))  # step 3 of the migration, worker still up

    with pytest.raises(errors.BrokerUnavailableError, match="cancelled a consumer"):
        consumer.get(DEADLINE_S)
    assert consumer.get(NO_WAIT) is None  # reconnects and declares the queue again
    message = dispatch()
    publisher.publish([message])
    delivery = consumer.get(DEADLINE_S)
    assert delivery is not None
    assert delivery.body == message.encode()
    delivery.ack()


def test_a_publisher_whose_connection_died_while_idle_reconnects_and_publishes(
    config: BrokerConfig, publisher: rabbitmq.RabbitDispatchPublisher, admin: Admin
) -> None:
    publisher.publish([dispatch()])
    assert publisher._connection is not None
    publisher._connection.close()  # as a missed heartbeat would, behind the publisher's back

    publisher.publish([dispatch()])
    assert admin.ready_count(config.queue_for(TYPE)) == 2


def test_pump_services_the_connection_while_a_delivery_is_held(
    publisher: rabbitmq.RabbitDispatchPublisher,
    consumers: Callable[[], rabbitmq.RabbitDispatchConsumer],
) -> None:
    consumer = consumers()
    publisher.publish([dispatch()])
    delivery = consumer.get(DEADLINE_S)
    assert delivery is not None
    started = time.monotonic()
    consumer.pump(0.2)
    assert time.monotonic() - started >= 0.2
    delivery.ack()


@pytest.mark.serial
def test_the_publisher_fails_while_the_broker_is_down_and_publishes_once_it_is_back(
    config: BrokerConfig,
    publisher: rabbitmq.RabbitDispatchPublisher,
    consumers: Callable[[], rabbitmq.RabbitDispatchConsumer],
) -> None:
    consumer = consumers()
    before = dispatch("before")
    publisher.publish([before])
    try:
        rabbitmqctl("stop_app")

        with pytest.raises(errors.BrokerUnavailableError) as caught:
            publisher.publish([dispatch("during")])
        assert f"{servers.RABBITMQ_HOST}:{servers.RABBITMQ_PORT}" in str(caught.value)
        with pytest.raises(errors.BrokerUnavailableError):
            consumer.get(QUIET_S)
    finally:
        rabbitmqctl("start_app")
        rabbitmqctl("await_startup")

    after = dispatch("after")
    wait_until(
        lambda: _published(publisher, after),
        DEADLINE_S,
        "the publisher to publish after the restart",
    )
    bodies: set[bytes] = set()
    while (delivery := consumer.get(DEADLINE_S if len(bodies) < 2 else QUIET_S)) is not None:
        bodies.add(delivery.body)
        delivery.ack()
    assert bodies == {before.encode(), after.encode()}


def _published(publisher: rabbitmq.RabbitDispatchPublisher, message: DispatchMessage) -> bool:
    try:
        publisher.publish([message])
    except errors.BrokerUnavailableError:
        return False
    return True


# --- routing: one queue per task type -----------------------------------------------------


def test_a_dispatch_goes_only_to_the_queue_of_its_task_type(
    config: BrokerConfig, publisher: rabbitmq.RabbitDispatchPublisher, admin: Admin
) -> None:
    extract, train = dispatch("a"), dispatch("b").model_copy(update={"task_type": "train"})
    publisher.publish([extract, train])
    assert admin.ready_count(config.queue_for(TYPE)) == 1
    assert admin.ready_count(config.queue_for("train")) == 1
    taken = admin.take(config.queue_for("train"))
    assert taken is not None and decode_dispatch(taken[1]) == train


def test_a_consumer_receives_only_its_task_types_and_the_rest_wait_in_their_queues(
    config: BrokerConfig, publisher: rabbitmq.RabbitDispatchPublisher, admin: Admin
) -> None:
    consumer = rabbitmq.RabbitDispatchConsumer(config, task_types=[TYPE])
    try:
        publisher.publish([dispatch("b").model_copy(update={"task_type": "train"}), dispatch("a")])
        delivery = consumer.get(DEADLINE_S)
        assert delivery is not None and decode_dispatch(delivery.body).task_key == "a"
        delivery.ack()
        assert consumer.get(QUIET_S) is None
    finally:
        consumer.close()
    # Nobody consumed the other type: its dispatch waits in its queue, never delivered.
    assert admin.ready_count(config.queue_for("train")) == 1


def _typed(task_type: str, i: int) -> DispatchMessage:
    return dispatch(f"{task_type}-{i}").model_copy(update={"task_type": task_type})


def _ready_of(admin: Admin, config: BrokerConfig, types: list[str]) -> int:
    return sum(admin.ready_count(config.queue_for(t)) for t in types)


@pytest.mark.parametrize("prefetch", [1, 2])
def test_a_consumer_of_several_types_holds_at_most_its_prefetch_in_all(
    config: BrokerConfig,
    publisher: rabbitmq.RabbitDispatchPublisher,
    admin: Admin,
    prefetch: int,
) -> None:
    """Quorum queues refuse a channel-wide prefetch, and a per-consumer one on K queues
    lets the broker push K: a consumer of K >= 2 types takes with basic.get, only while
    it holds fewer than its prefetch. The broker's own count shows what it handed out."""
    types = sorted([TYPE, "train", "score"])  # the order the consumer goes round in
    consumer = rabbitmq.RabbitDispatchConsumer(config, prefetch=prefetch, task_types=types)
    try:
        assert consumer.get(NO_WAIT) is None  # connected, queues declared, all empty
        publisher.publish([_typed(t, i) for t in types for i in range(2)])
        held = [consumer.get(DEADLINE_S) for _ in range(prefetch)]
        assert all(held)
        assert consumer.get(QUIET_S) is None
        # Handed out (unacknowledged): exactly the prefetch; every other one is ready.
        assert _ready_of(admin, config, types) == 2 * len(types) - prefetch
        taken = [decode_dispatch(d.body).task_type for d in held if d]
        for delivery in held:
            assert delivery is not None
            delivery.ack()
        after = consumer.get(DEADLINE_S)
        assert after is not None
        assert _ready_of(admin, config, types) == 2 * len(types) - prefetch - 1
        # Round-robin over the queues: the next comes from the type after the last one's.
        assert decode_dispatch(after.body).task_type == types[len(taken) % len(types)], taken
        after.ack()
    finally:
        consumer.close()


def test_a_dispatch_to_a_deleted_queue_is_returned_and_stays_pending_then_lands(
    config: BrokerConfig, publisher: rabbitmq.RabbitDispatchPublisher, admin: Admin
) -> None:
    """Mandatory publishing: a queue deleted under a publisher that declared it returns
    the dispatch (the outbox row stays pending); the next publish declares it again."""
    publisher.publish([dispatch("first")])
    admin.channel.queue_delete(config.queue_for(TYPE))
    with pytest.raises(errors.UnroutableDispatchError, match="stay pending"):
        publisher.publish([dispatch("second")])
    publisher.publish([dispatch("second")])
    assert admin.ready_count(config.queue_for(TYPE)) == 1


def test_a_consumer_of_several_types_is_counted_as_each_types_consumer(
    config: BrokerConfig,
) -> None:
    """basic.get makes no consumer the broker counts: the presence queue of each type
    does, so ``why`` never says "no worker is consuming" a type such a worker runs."""
    types = ["train", "score"]
    consumer = rabbitmq.RabbitDispatchConsumer(config, task_types=types)
    try:
        assert consumer.get(NO_WAIT) is None
        assert [rabbitmq.queue_state(config, t).consumers for t in types] == [1, 1]
    finally:
        consumer.close()
    wait_until(
        lambda: [rabbitmq.queue_state(config, t).consumers for t in types] == [0, 0],
        DEADLINE_S,
        "the closed consumer is still counted",
    )
