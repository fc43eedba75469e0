import collections
import psycopg
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from flowforge.app.service import FlowForge
from tests.integration import test_stateful as ts


def test_count(postgres_url, monkeypatch):
    rules = collections.Counter()
    inits = [0]
    orig_init = ts.ServiceAgainstAggregates.__init__

    def init(self):
        inits[0] += 1
        orig_init(self)

    monkeypatch.setattr(ts.ServiceAgainstAggregates, "__init__", init)
    orig_inv = ts.ServiceAgainstAggregates.rows_log_and_outbox_agree_with_the_model
    with FlowForge(postgres_url) as app, psycopg.connect(postgres_url, autocommit=True) as clock:
        ts.ServiceAgainstAggregates.app = app
        ts.ServiceAgainstAggregates.url = postgres_url
        ts.ServiceAgainstAggregates.clock = clock
        import sys

        def tracer(frame, event, arg):
            if (
                event == "call"
                and frame.f_code.co_filename.endswith("test_stateful.py")
                and frame.f_back
                and frame.f_back.f_code.co_filename.endswith("hypothesis/stateful.py")
            ):
                rules[frame.f_code.co_name] += 1
            return None

        sys.setprofile(tracer)
        try:
            run_state_machine_as_test(
                ts.ServiceAgainstAggregates,
                settings=settings(ts.SETTINGS, database=None, phases=[Phase.generate]),
            )
        finally:
            sys.setprofile(None)
    print(inits, sorted(rules.items()))
