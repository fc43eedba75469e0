"""How the worker settles a delivery: the decision as data, performed in one place.

The per-delivery code paths compute a :class:`Settlement` (ack, requeue or dead-letter,
and what happened); the worker performs it in one ``finally``, so every delivery is
settled exactly once on every path. Errors are classified by kind, never by the order
of ``except`` clauses: the kinds :func:`for_error` knows are disjoint subtrees of
``flowforge.errors`` (``tests/unit/processes/test_settle.py`` checks it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from flowforge import errors, observe
from flowforge.processes.transport import Delivery, SettleAction


@dataclass(frozen=True, slots=True)
class Settlement:
    """What to do with a delivery, and what happened (for logs and tests)."""

    action: SettleAction
    #: "succeed", "fail", "stale", "skipped", "dead_lettered" or "requeued".
    result: str
    #: Wait before taking the next message (the database is down: do not spin).
    back_off: bool = False
    #: The log line for a delivery that did not run to an outcome.
    reason: str = ""


#: Not a dispatch at all: it can never run, and must not loop.
MALFORMED: Final = Settlement(
    "dead_letter", "dead_lettered", reason="malformed dispatch dead-lettered"
)
#: The task run does not exist (another deployment's message, or a wiped database).
UNKNOWN_RUN: Final = Settlement(
    "dead_letter", "dead_lettered", reason="dispatch for an unknown task run dead-lettered"
)
#: Another deployment's dispatch (two deployments share a queue): its task run is in
#: another database. Dead-lettered, not requeued: on a shared queue a requeue hands it
#: back to the wrong worker as often as to its own, and hides the misconfiguration; its
#: own deployment's scheduler redispatches the task (``redispatch_stalled``).
FOREIGN: Final = Settlement(
    "dead_letter",
    "dead_lettered",
    reason="dispatch of another deployment dead-lettered: two deployments share this "
    "queue; give each its own (unset FLOWFORGE_DISPATCH_* or set them apart)",
)
#: Never ack what is not durable: the broker redelivers, the claim decides.
DATABASE_FAILED: Final = Settlement(
    "requeue", "requeued", back_off=True, reason="database unavailable; dispatch requeued"
)
#: An error nobody expected is on its way up (a lost connection, a bug): the message
#: goes back on the queue, and the claim makes its redelivery harmless.
UNEXPECTED: Final = Settlement("requeue", "requeued", reason="delivery abandoned by an error")


def ack(result: str) -> Settlement:
    """The task ran to a durable outcome, or the dispatch was a duplicate: ack."""
    return Settlement("ack", result)


def for_error(exc: BaseException) -> Settlement:
    """The settlement for an error raised while handling a delivery."""
    if isinstance(exc, errors.MalformedDispatchError):
        return MALFORMED
    if isinstance(exc, errors.NotFoundError):
        return UNKNOWN_RUN
    if isinstance(exc, errors.PersistenceError):
        return DATABASE_FAILED
    return UNEXPECTED


def perform(delivery: Delivery, action: SettleAction) -> None:
    """Send ``action`` to the delivery's queue."""
    if action == "ack":
        delivery.ack()
    elif action == "requeue":
        delivery.requeue()
    else:
        delivery.dead_letter()
        observe.announce.dead_lettered()
