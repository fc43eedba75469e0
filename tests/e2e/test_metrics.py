"""Prometheus metrics from real processes (docs/observability.md): a scheduler, a
publisher and two workers on PostgreSQL and RabbitMQ, each with ``--metrics-port``, run
the example workflow (one task fails once and is retried) and dead-letter a message that
is no dispatch. Each ``/metrics`` is scraped over HTTP and parsed with the client
library's parser: the transitions counted, summed over the processes, are the audit
log's, edge by edge; the dead letters are the one sent; every dispatch published was
confirmed; the handlers' durations are counted by type and outcome; the scheduler
alone serves the database's backlog."""

from __future__ import annotations

import urllib.request
from collections import Counter
from pathlib import Path

import pika
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests import helpers, servers
from tests.e2e.test_cli import EXAMPLE, Cli, production_processes

MACHINES = {"TaskRun": "task_run", "WorkflowRun": "workflow_run"}


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of ``http://127.0.0.1:PORT/metrics``, by sample name."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as page:
        text = page.read().decode()
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def total(scrapes: list[dict[str, list[tuple[dict[str, str], float]]]], name: str) -> float:
    return sum(value for scraped in scrapes for _, value in scraped.get(name, []))


@pytest.mark.postgres
@pytest.mark.rabbitmq
def test_the_counters_scraped_from_every_process_agree_with_the_audit_log(
    production: Cli, tmp_path: Path
) -> None:
    cli = production
    assert cli("db", "init").returncode == 0
    ports = {name: servers.free_port() for name in ("scheduler", "publisher", "w1", "w2")}
    processes = production_processes(
        cli,
        tmp_path,
        workers=("w1", "w2"),
        flags=lambda name: ["--metrics-port", str(ports[name])],
    )
    try:
        run_id = cli.json("submit", EXAMPLE, "--input", "rows=8")["run_id"]
        watched = cli("status", run_id, "--watch", "--json", timeout=90)
        assert watched.returncode == 0, watched.stderr
        dead_letter_one(cli)
        scrapes = helpers.wait_until(
            lambda: settled([scrape(port) for port in ports.values()]), 30, "the dead letter"
        )
        backlog = scrape(ports["scheduler"])
    finally:
        codes = helpers.stop_all(processes, timeout=15)
    assert codes == dict.fromkeys(processes, 0)

    counted: Counter[tuple[str, str]] = Counter()
    for scraped in scrapes:
        for labels, value in scraped.get("flowforge_transitions_total", []):
            counted[(labels["machine"], labels["edge"])] += int(value)
    history = cli.json("history", run_id)
    logged = Counter(
        (MACHINES[e["aggregate"]], e["transition"])
        for e in history
        if e["transition"] != "create"  # written by `flowforge submit`, not scraped
    )
    assert counted == logged
    assert logged[("task_run", "fail")] == 1 and logged[("task_run", "schedule_retry")] == 1
    dispatches = Counter(
        labels["outcome"]
        for scraped in scrapes
        for labels, value in scraped.get("flowforge_dispatches_total", [])
        for _ in range(int(value))
    )
    # Five tasks, the retry, each at least once; every one sent was confirmed.
    assert dispatches["published"] == dispatches["confirmed"] >= 6
    assert dispatches["returned"] == 0
    handlers = [
        (labels["task_type"], labels["outcome"], value)
        for scraped in scrapes
        for labels, value in scraped.get("flowforge_handler_seconds_count", [])
    ]
    assert sum(v for t, o, v in handlers if (t, o) == ("enrich", "fail")) == 1
    assert total(scrapes, "flowforge_dispatches_dead_lettered_total") == 1
    assert backlog["flowforge_outbox_pending"] == [({}, 0.0)]  # every dispatch confirmed
    assert {labels["state"]: v for labels, v in backlog["flowforge_tasks"]} == dict.fromkeys(
        ("pending", "ready", "running", "retrying", "failed"), 0.0
    )  # every task finished
    assert all("flowforge_outbox_pending" not in scrape_ for scrape_ in scrapes[1:])


def settled(
    scrapes: list[dict[str, list[tuple[dict[str, str], float]]]],
) -> list[dict[str, list[tuple[dict[str, str], float]]]] | None:
    """The scrapes, once the dead letter has been counted."""
    return scrapes if total(scrapes, "flowforge_dispatches_dead_lettered_total") >= 1 else None


def dead_letter_one(cli: Cli) -> None:
    """Send the `extract` queue a message that is no dispatch: a worker dead-letters it."""
    queue = f"{cli.env['FLOWFORGE_DISPATCH_QUEUE']}.extract"
    connection = pika.BlockingConnection(pika.URLParameters(servers.RABBITMQ_URL))
    try:
        connection.channel().basic_publish(
            cli.env["FLOWFORGE_DISPATCH_EXCHANGE"], queue, b"\x00 not a dispatch"
        )
    finally:
        connection.close()
