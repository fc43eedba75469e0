"""CPU time as Linux accounts it: a process's own, and the whole machine's busy time.

Per task, the difference between the machine's busy time and the clients' own is what
the servers (PostgreSQL, RabbitMQ) and the kernel spent: on a quiet machine, that is
where the rest of the CPU went.
"""

from __future__ import annotations

import os
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command's name (field 3 onwards)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def process_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (its threads included)."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _pids_named(name: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == name:
                    pids.append(int(entry.name))
            except OSError:  # exited meanwhile
                continue
    return pids


def server_seconds(name: str) -> float | None:
    """CPU seconds so far of every process named ``name`` (``postgres``, ``beam.smp``)
    on this machine, with the exited children they waited for: PostgreSQL's backends
    of closed connections are counted in the postmaster's children's time. ``None``
    when none runs here (a server on another machine)."""
    total, found = 0, False
    for pid in _pids_named(name):
        try:
            fields = _stat(pid)
        except OSError:
            continue
        found = True
        total += sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    return total / _TICKS if found else None


#: The servers whose CPU a measurement reports, by the role it names them with.
SERVERS = {"postgres": "postgres", "rabbitmq": "beam.smp"}


def machine_busy_seconds() -> float:
    """CPU seconds the machine has spent not idle since boot, over every core."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:8]]
    # user nice system idle iowait irq softirq: all but idle and iowait is busy (steal,
    # the hypervisor's, is not the machine's own work).
    return (sum(fields) - fields[3] - fields[4]) / _TICKS
