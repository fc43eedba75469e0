"""Signals are relayed to a thread, so a handler never takes a lock the interrupted
main thread may hold (``flowforge/processes/signals.py``). Real signals, sent to this
process; the previous handlers are restored after each test."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator

import pytest

from flowforge.cli.stopping import Interrupts
from flowforge.processes.loop import Stop
from flowforge.processes.signals import STOP_SIGNALS, relay_signals

#: Only ends a broken test; a relayed signal takes microseconds.
DEADLINE_S = 5.0


@pytest.fixture(autouse=True)
def previous_handlers() -> Iterator[None]:
    saved = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


@pytest.mark.timeout(30)
def test_a_sigterm_while_the_main_thread_holds_the_stops_lock_still_stops() -> None:
    stop = Stop()
    stop.install_signal_handlers()
    # The lock Event.set takes, held by this (the main) thread as Event.wait holds it
    # just after waking: a handler that called stop.set() here would wait for ever.
    with stop._event._cond:  # type: ignore[attr-defined]
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # the second, as `timeout` forwards it
        assert not stop.is_set()  # the handler returned without reacting in place
    assert stop.wait(DEADLINE_S), "the relayed SIGTERM never stopped"
    assert stop.reason == "SIGTERM"


def test_installing_twice_relays_each_signal_once() -> None:
    stop = Stop()
    wakes: list[str] = []
    woken = threading.Event()

    def wake() -> None:
        wakes.append(stop.reason)
        woken.set()

    stop.also_wakes(wake)
    stop.install_signal_handlers()
    handler = signal.getsignal(signal.SIGINT)
    stop.install_signal_handlers()
    assert signal.getsignal(signal.SIGINT) is handler
    os.kill(os.getpid(), signal.SIGINT)
    assert woken.wait(DEADLINE_S)
    assert wakes == ["SIGINT"]  # one relay: one reaction


def test_restore_puts_the_previous_handlers_back_and_ends_the_relay_thread() -> None:
    before = signal.getsignal(signal.SIGTERM)
    received: list[signal.Signals] = []
    seen = threading.Event()

    def react(signum: signal.Signals) -> None:
        received.append(signum)
        seen.set()

    others = set(threading.enumerate())
    restore = relay_signals(react)
    relays = [t for t in threading.enumerate() if t not in others]
    os.kill(os.getpid(), signal.SIGTERM)
    assert seen.wait(DEADLINE_S)
    restore()
    assert signal.getsignal(signal.SIGTERM) is before
    for relay in relays:
        relay.join(DEADLINE_S)
    assert received == [signal.SIGTERM]
    assert [relay.name for relay in relays] == ["signals"]
    assert not relays[0].is_alive()


def test_interrupts_stop_on_the_first_signal_and_hurry_on_the_second() -> None:
    stop = Stop()
    with Interrupts(stop) as interrupts:
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.wait(DEADLINE_S)
        assert not interrupts.hurry.is_set()
        os.kill(os.getpid(), signal.SIGTERM)
        assert interrupts.hurry.wait(DEADLINE_S)
    assert stop.reason == "SIGINT"
