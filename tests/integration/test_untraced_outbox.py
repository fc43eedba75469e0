"""A publisher reads its runs' trace contexts only when it carries traces
(``observe.announce.traced``: the traces observer installed), on both backends: without
one a sweep's read skips the per-row subquery and its dispatches carry no context."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from flowforge import observe
from flowforge.app.service import FlowForge
from tests.helpers import one_task

CONTEXT = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}


class _Stamps(observe.Observer):
    """Gives each run it sees created the same trace context, as the traces observer's
    creation span would."""

    def run_creation(self, creation: observe.RunCreation) -> AbstractContextManager[object]:
        creation.context = dict(CONTEXT)
        return nullcontext()


class _Carries(observe.Observer):
    carries_trace_context = True


def _pending_contexts(app: FlowForge, *, traced: bool) -> list[object]:
    with app.store.write() as writes:
        return [row.trace_context for row in writes.outbox.pending(10, traced=traced)]


def test_the_sweep_reads_the_runs_context_only_when_traced(app: FlowForge) -> None:
    with observe.installed(_Stamps()):
        app.start_workflow_run(one_task("t"))
    assert _pending_contexts(app, traced=True) == [CONTEXT]
    assert _pending_contexts(app, traced=False) == [None]


def test_only_an_observer_that_carries_trace_context_makes_the_publisher_traced() -> None:
    assert not observe.announce.traced
    with observe.installed(_Stamps()):
        assert not observe.announce.traced
        with observe.installed(_Carries()):
            assert observe.announce.traced
