"""The thread-local capture of a handler's output (``processes/capture.py``)."""

from __future__ import annotations

import logging
import sys
import threading

from flowforge.processes import capture

log = logging.getLogger("tests.capture")


def test_two_attempts_on_two_threads_each_keep_only_their_own_output() -> None:
    capture.install()
    logging.getLogger().setLevel(logging.INFO)
    barrier = threading.Barrier(2, timeout=10)
    outputs = {name: capture.AttemptOutput() for name in ("a", "b")}

    def attempt(name: str) -> None:
        with capture.capturing(outputs[name]):
            for i in range(50):
                barrier.wait()  # the two interleave, line by line
                print(f"{name} printed {i}")
                sys.stderr.write(f"{name} wrote {i}\n")
                log.warning("%s logged %d", name, i)

    threads = [threading.Thread(target=attempt, args=(name,)) for name in outputs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for name, other in (("a", "b"), ("b", "a")):
        captured = outputs[name].captured()
        assert captured is not None
        assert captured.text.count(f"{name} printed") == 50
        assert captured.text.count(f"{name} wrote") == 50
        assert captured.text.count(f"{name} logged") == 50
        assert f"{other} " not in captured.text


def test_an_attempt_that_wrote_nothing_has_nothing_to_store() -> None:
    assert capture.AttemptOutput().captured() is None


def test_the_buffer_keeps_its_head_and_tail_and_counts_what_it_dropped() -> None:
    output = capture.AttemptOutput(head=10, tail=5)
    for chunk in ("0123456", "789abcdef", "ghijklmnop"):
        output.write(chunk)
    captured = output.captured()
    assert captured is not None
    assert captured.dropped_chars == 26 - 15
    assert captured.text == "0123456789" + capture.truncation_notice(11) + "lmnop"


def test_a_thread_without_an_attempt_writes_to_the_real_stream(capsys: object) -> None:
    capture.install()
    print("to the terminal")
    assert capture.current() is None
    assert "to the terminal" in capsys.readouterr().out  # type: ignore[attr-defined]
