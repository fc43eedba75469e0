"""The broker's configuration and queue arguments: pure, no broker needed."""

from __future__ import annotations

import pytest

from flowforge import errors
from flowforge.config import BrokerConfig
from flowforge.processes import rabbitmq


def test_the_dispatch_queue_arguments_make_a_quorum_queue_that_dead_letters_at_least_once() -> (
    None
):
    config = BrokerConfig(dead_letter_exchange="dlx.x", routing_key="rk.x", delivery_limit=7)
    assert rabbitmq.dispatch_queue_arguments(config) == {
        "x-queue-type": "quorum",
        "x-dead-letter-exchange": "dlx.x",
        "x-dead-letter-routing-key": "rk.x",
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
        "x-delivery-limit": 7,
    }
    assert dict(rabbitmq.DISPATCH_QUEUE_ARGUMENTS) == {"x-queue-type": "quorum"}


def test_broker_config_defaults_name_the_flowforge_topology() -> None:
    config = BrokerConfig()
    assert (config.exchange, config.queue, config.routing_key) == (
        "flowforge",
        "flowforge.tasks",
        "flowforge.tasks",
    )
    assert (config.dead_letter_exchange, config.dead_letter_queue) == (
        "flowforge.dlx",
        "flowforge.tasks.dead",
    )
    assert (config.delivery_limit, config.heartbeat_seconds) == (20, 30)
    assert config.url == "amqp://guest:guest@127.0.0.1:5672/%2F"


def test_broker_config_from_env_reads_each_variable_and_defaults_the_rest() -> None:
    config = BrokerConfig.from_env(
        {
            "FLOWFORGE_BROKER_URL": "amqps://u:p@rabbit.example:5671/prod",
            "FLOWFORGE_DISPATCH_EXCHANGE": "ex",
            "FLOWFORGE_DISPATCH_QUEUE": "q",
            "FLOWFORGE_DISPATCH_ROUTING_KEY": "rk",
            "FLOWFORGE_DEAD_LETTER_EXCHANGE": "dlx",
            "FLOWFORGE_DEAD_LETTER_QUEUE": "dlq",
        }
    )
    assert (
        config.url,
        config.exchange,
        config.queue,
        config.routing_key,
        config.dead_letter_exchange,
        config.dead_letter_queue,
    ) == ("amqps://u:p@rabbit.example:5671/prod", "ex", "q", "rk", "dlx", "dlq")
    assert BrokerConfig.from_env({}) == BrokerConfig()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://secret-user:hunter2@rabbit.example/", "'rabbit.example'"),
        ("rabbit.example:5672", "'(none)'"),
        ("amqp://secret-user:hunter2@/", "'(none)'"),
    ],
)
def test_broker_config_rejects_a_url_that_is_not_amqp_with_a_host(url: str, shown: str) -> None:
    with pytest.raises(errors.ConfigurationError) as caught:
        BrokerConfig.from_env({"FLOWFORGE_BROKER_URL": url})
    message = str(caught.value)
    assert "FLOWFORGE_BROKER_URL" in message
    assert f"host {shown}" in message
    assert "amqp://" in message
    assert "hunter2" not in message


def test_broker_config_rejects_an_invalid_port_naming_the_variable() -> None:
    with pytest.raises(errors.ConfigurationError, match="FLOWFORGE_BROKER_URL"):
        BrokerConfig(url="amqp://rabbit.example:99999/")


def test_broker_config_rejects_an_empty_name_naming_its_variable() -> None:
    with pytest.raises(errors.ConfigurationError, match="FLOWFORGE_DISPATCH_QUEUE"):
        BrokerConfig.from_env({"FLOWFORGE_DISPATCH_QUEUE": ""})


def test_broker_config_does_not_show_the_password_in_its_repr() -> None:
    assert "hunter2" not in repr(BrokerConfig(url="amqp://u:hunter2@rabbit.example/"))


def test_a_broker_url_may_list_a_clusters_nodes_which_are_tried_in_the_given_order() -> None:
    config = BrokerConfig.from_env(
        {"FLOWFORGE_BROKER_URL": "amqp://u:p@rabbit-1:5672/%2F, amqp://u:p@rabbit-2:5673/%2F"}
    )
    assert config.urls == ("amqp://u:p@rabbit-1:5672/%2F", "amqp://u:p@rabbit-2:5673/%2F")
    assert BrokerConfig().urls == (BrokerConfig().url,)


@pytest.mark.parametrize(
    "url",
    [
        "amqp://u:hunter2@rabbit-1/%2F,rabbit-2:5672",
        "amqp://u:hunter2@rabbit-1/%2F,",
        "amqp://u:hunter2@rabbit-1/%2F,amqp://u:hunter2@rabbit-2:99999/%2F",
    ],
)
def test_a_node_list_with_one_bad_url_is_rejected_naming_the_variable(url: str) -> None:
    with pytest.raises(errors.ConfigurationError) as caught:
        BrokerConfig.from_env({"FLOWFORGE_BROKER_URL": url})
    assert "FLOWFORGE_BROKER_URL" in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_a_deployment_derives_every_topology_name_not_set_explicitly() -> None:
    config = BrokerConfig.from_env({"FLOWFORGE_DISPATCH_QUEUE": "shared.tasks"})
    mine = config.for_deployment("3f2a6c1e0b9d")
    assert (mine.exchange, mine.queue, mine.routing_key) == (
        "flowforge.3f2a6c1e0b9d",
        "shared.tasks",  # set explicitly: kept
        "flowforge.3f2a6c1e0b9d.tasks",
    )
    assert (mine.dead_letter_exchange, mine.dead_letter_queue) == (
        "flowforge.3f2a6c1e0b9d.dlx",
        "flowforge.3f2a6c1e0b9d.tasks.dead",
    )
    assert (mine.url, mine.delivery_limit) == (config.url, config.delivery_limit)


def test_two_deployments_share_no_topology_name_by_default() -> None:
    names = ("exchange", "queue", "dead_letter_exchange", "dead_letter_queue")
    first = BrokerConfig().for_deployment("aaaaaaaaaaaa")
    second = BrokerConfig().for_deployment("bbbbbbbbbbbb")
    assert not {getattr(first, n) for n in names} & {getattr(second, n) for n in names}
