"""A process that abandoned threads ends at once, with its code and all its output."""

from __future__ import annotations

import subprocess
import sys
import textwrap

ABANDONING = textwrap.dedent(
    """
    import sys, threading
    from flowforge.cli import ending

    release = threading.Event()
    threading.Thread(target=release.wait, daemon=True).start()
    print("said before the end", end="")  # unflushed: end_process must flush it
    {abandon}
    code = ending.end_process(3)
    print(" and after it", end="")
    sys.exit(code + 1)
    """
)


def run(abandon: str) -> subprocess.CompletedProcess[str]:
    source = ABANDONING.format(abandon=abandon)
    return subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, timeout=60, check=False
    )


def test_a_process_that_abandoned_threads_ends_with_its_code_and_its_output() -> None:
    done = run("ending.abandoned_threads()")
    assert (done.returncode, done.stdout) == (3, "said before the end")


def test_a_process_that_abandoned_nothing_ends_as_usual() -> None:
    done = run("")
    assert (done.returncode, done.stdout) == (4, "said before the end and after it")
