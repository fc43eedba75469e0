"""A three-node RabbitMQ cluster on this machine, for the high-availability tests.

Each node has its own node name, AMQP and distribution ports, config, data and log
directories; they share the Erlang cookie of the machine's RabbitMQ user, which is what
lets them (and ``rabbitmqctl -n``) talk to each other. The default node
(rabbit@localhost on 5672) is never touched: every command names its node.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pika
import pika.exceptions

from tests import servers

#: Booting a node and joining it take seconds each on a loaded 2-core machine.
COMMAND_TIMEOUT_S = 120


@dataclass(frozen=True)
class Node:
    name: str  # ffha<id>-<n>@localhost
    amqp_port: int
    dist_port: int
    home: Path

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.amqp_port}/%2F"


def remove_leftovers() -> None:
    """Kill and remove the nodes of a test run that died before its ``finally``.

    A node is killed only if its pid file's process is still that node's Erlang VM (its
    command line names the node's directory): a pid may have been reused since.
    """
    for base in Path(tempfile.gettempdir()).glob("ffha-rabbit-*"):
        for pid_file in base.glob("node*/pid"):
            pid = pid_file.read_text().strip()
            cmdline = Path(f"/proc/{pid}/cmdline")
            if pid.isdigit() and cmdline.exists() and str(base) in cmdline.read_text():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
        shutil.rmtree(base, ignore_errors=True)


class RabbitCluster:
    """Three fresh nodes joined into one cluster; :meth:`destroy` removes every trace."""

    def __init__(self, size: int = 3) -> None:
        self.id = uuid.uuid4().hex[:6]
        self.base = Path(tempfile.mkdtemp(prefix=f"ffha-rabbit-{self.id}-"))
        self.base.chmod(0o755)  # the nodes run as the rabbitmq user
        self.nodes = [self._node(number) for number in range(1, size + 1)]
        self.pids: dict[str, int] = {}
        #: Nodes already killed: their pid may belong to another process by now.
        self.killed: set[str] = set()

    @property
    def url(self) -> str:
        """FLOWFORGE_BROKER_URL for the whole cluster: every node, in order."""
        return ",".join(node.url for node in self.nodes)

    def start(self) -> None:
        """Boot the first node, then the others, which join it as they boot.

        Joining at boot (classic peer discovery naming the first node) spares the
        stop_app / join_cluster / start_app round of the CLI, whose every call costs
        seconds on a busy machine.
        """
        first, *others = self.nodes
        self._spawn(first)
        self._await_amqp(first)
        for node in others:
            self._spawn(node)
        for node in others:
            self._await_amqp(node)
        running = self.running_nodes(first)
        if running != sorted(node.name for node in self.nodes):
            raise RuntimeError(f"the nodes did not form one cluster: {running}")

    def running_nodes(self, via: Node) -> list[str]:
        out = self.ctl(via, "eval", "rabbit_nodes:all_running().")
        return sorted(name.strip(" '[]\n") for name in out.split(","))

    def queue(self, via: Node, queue: str) -> tuple[str, list[str]]:
        """The queue's leader node and its members, as ``via`` sees them."""
        out = self.ctl(via, "list_queues", "-q", "--no-table-headers", "name", "leader", "members")
        for line in out.splitlines():
            fields = line.split("\t")
            if fields[0] == queue:
                members = fields[2].strip("[]").replace("'", "").split(",")
                return fields[1], sorted(m.strip() for m in members if m.strip())
        raise AssertionError(f"queue {queue!r} not found on {via.name}: {out!r}")

    def node(self, name: str) -> Node:
        return next(node for node in self.nodes if node.name == name)

    def kill(self, node: Node) -> None:
        """SIGKILL the node's Erlang VM: no clean shutdown, no goodbye to the cluster."""
        self.killed.add(node.name)
        os.kill(self.pids.pop(node.name), signal.SIGKILL)

    def destroy(self) -> None:
        """SIGKILL every node still running (booted or not) and remove their files."""
        for node in self.nodes:
            if node.name in self.killed:
                continue
            pid_file = node.home / "pid"
            pid = self.pids.pop(node.name, None)
            if pid is None and pid_file.exists() and pid_file.read_text().strip():
                pid = int(pid_file.read_text().strip())
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.base, ignore_errors=True)

    def ctl(self, node: Node, *args: str) -> str:
        result = subprocess.run(
            ["rabbitmqctl", "-n", node.name, *args],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"rabbitmqctl -n {node.name} {' '.join(args)} failed ({result.returncode}): "
                f"{result.stdout}{result.stderr}\n{self.log_tail(node)}"
            )
        return result.stdout

    def log_tail(self, node: Node, lines: int = 20) -> str:
        """The log's last lines, after the lines around its first error (a node that
        fails to boot logs why, then many lines of stopping)."""
        logs = sorted((node.home / "log").glob("*.log"))
        text = "\n".join(log.read_text(errors="replace") for log in logs).splitlines()
        first_error = next((i for i, line in enumerate(text) if "[error]" in line), None)
        around = [] if first_error is None else text[max(first_error - 5, 0) : first_error + 15]
        return f"--- {node.name} log ---\n" + "\n".join([*around, "...", *text[-lines:]])

    def _node(self, number: int) -> Node:
        home = self.base / f"node{number}"
        (home / "mnesia").mkdir(parents=True)
        (home / "log").mkdir()
        node = Node(
            f"ffha{self.id}-{number}@localhost", servers.free_port(), servers.free_port(), home
        )
        config = f"listeners.tcp.1 = 127.0.0.1:{node.amqp_port}\n"
        if number > 1:
            config += (
                "cluster_formation.peer_discovery_backend = classic_config\n"
                f"cluster_formation.classic_config.nodes.1 = ffha{self.id}-1@localhost\n"
            )
        (home / "rabbitmq.conf").write_text(config)
        (home / "enabled_plugins").write_text("[].\n")  # no management port clashes
        (home / "rabbitmq-env.conf").write_text("")  # not the default node's NODENAME
        shutil.chown(home, "rabbitmq", "rabbitmq")
        for path in home.rglob("*"):
            shutil.chown(path, "rabbitmq", "rabbitmq")
        return node

    def _await_amqp(self, node: Node) -> None:
        """Until the node completes an AMQP handshake: it has booted (and joined)."""
        deadline = time.monotonic() + COMMAND_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                pika.BlockingConnection(pika.URLParameters(node.url)).close()
            except pika.exceptions.AMQPError:
                time.sleep(0.2)
            else:
                self.pids[node.name] = int((node.home / "pid").read_text().strip())
                return
        raise RuntimeError(
            f"{node.name} did not boot in {COMMAND_TIMEOUT_S} s\n{self.log_tail(node)}"
        )

    def _spawn(self, node: Node) -> None:
        home = node.home
        env = {
            **os.environ,
            "RABBITMQ_NODENAME": node.name,
            "RABBITMQ_NODE_PORT": str(node.amqp_port),
            "RABBITMQ_DIST_PORT": str(node.dist_port),
            "RABBITMQ_MNESIA_BASE": str(home / "mnesia"),
            "RABBITMQ_LOG_BASE": str(home / "log"),
            "RABBITMQ_CONFIG_FILE": str(home / "rabbitmq.conf"),
            "RABBITMQ_CONF_ENV_FILE": str(home / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(home / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(home / "pid"),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }
        subprocess.run(
            ["rabbitmq-server", "-detached"],
            env=env,
            check=True,
            capture_output=True,
            timeout=COMMAND_TIMEOUT_S,
        )
