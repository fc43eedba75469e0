"""The RabbitMQ package's pure parts: who may import pika, what the package exports,
and the operator messages it builds. No broker needed (tests/integration has those)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from flowforge import errors
from flowforge.config import BrokerConfig
from flowforge.processes import rabbitmq
from flowforge.processes.rabbitmq import translate

PACKAGE_ROOT = Path(rabbitmq.__file__).resolve().parents[2]
RABBITMQ_DIR = Path(rabbitmq.__file__).resolve().parent


def imports_pika(path: Path) -> bool:
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        if any(name == "pika" or name.startswith("pika.") for name in names):
            return True
    return False


def test_only_the_rabbitmq_package_imports_pika() -> None:
    offenders = [
        str(path.relative_to(PACKAGE_ROOT))
        for path in PACKAGE_ROOT.rglob("*.py")
        if RABBITMQ_DIR not in path.parents and imports_pika(path)
    ]
    assert offenders == []
    assert imports_pika(RABBITMQ_DIR / "topology.py"), "the scan must see a real import"


def test_the_names_other_modules_import_are_re_exported_by_the_package() -> None:
    for name in (
        "DISPATCH_QUEUE_ARGUMENTS",
        "MAX_PUBLISH_ATTEMPTS",
        "PUBLISH_CONFIRM_TIMEOUT_S",
        "RabbitDispatchConsumer",
        "RabbitDispatchPublisher",
        "connect",
        "declare_dispatch_queue",
        "dispatch_queue_arguments",
    ):
        assert name in rabbitmq.__all__
        assert getattr(rabbitmq, name) is not None


def test_the_queue_mismatch_message_gives_the_short_procedure_and_points_to_the_doc() -> None:
    config = BrokerConfig(queue="jobs", dead_letter_queue="jobs.dead")
    message = translate.queue_mismatch_message(
        config, "jobs", "PRECONDITION_FAILED - inequivalent arg 'x-queue-type'"
    )
    assert "is not a quorum queue" in message
    assert "3. Delete the queue: rabbitmqctl delete_queue jobs\n" in message
    assert "docs/delivery.md" in message
    assert len(message.splitlines()) <= 8, "the full prose belongs in docs/delivery.md"


def test_the_queue_mismatch_message_for_the_dead_letter_queue_warns_about_its_messages() -> None:
    config = BrokerConfig(queue="jobs", dead_letter_queue="jobs.dead")
    message = translate.queue_mismatch_message(
        config, "jobs.dead", "PRECONDITION_FAILED - inequivalent arg 'x-dead-letter-exchange'"
    )
    assert "Move its dead letters first" in message
    assert "was declared with other arguments" in message


def test_the_queue_mismatch_message_names_a_non_default_vhost() -> None:
    config = BrokerConfig(url="amqp://guest:guest@127.0.0.1:5672/prod", queue="jobs")
    message = translate.queue_mismatch_message(config, "jobs", "PRECONDITION_FAILED")
    assert "rabbitmqctl delete_queue -p prod jobs" in message


def test_the_endpoint_never_shows_the_credentials() -> None:
    config = BrokerConfig(url="amqp://admin:s3cret@rabbit.example:5673/%2F")
    assert translate.endpoint(config) == "rabbit.example:5673"


def test_a_url_pika_rejects_is_a_configuration_error() -> None:
    config = BrokerConfig(url="amqp://guest:guest@127.0.0.1:5672/%2F?heartbeat=soon")
    with pytest.raises(errors.ConfigurationError, match="query options"):
        translate.parameters(config)
