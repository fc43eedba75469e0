"""CPU time as Linux accounts it: a process's own, and the whole machine's busy time.

Per task, the difference between the machine's busy time and the clients' own is what
the servers (PostgreSQL, RabbitMQ) and the kernel spent: on a quiet machine, that is
where the rest of the CPU went.
"""

from __future__ import annotations

import os
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def process_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def machine_busy_seconds() -> float:
    """CPU seconds the machine has spent not idle since boot, over every core."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:8]]
    # user nice system idle iowait irq softirq: all but idle and iowait is busy (steal,
    # the hypervisor's, is not the machine's own work).
    return (sum(fields) - fields[3] - fields[4]) / _TICKS
