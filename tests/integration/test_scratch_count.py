import collections
import psycopg
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from flowforge.app.service import FlowForge
from tests.integration import test_stateful as ts

CALLS = collections.Counter()


def test_count(postgres_url, monkeypatch):
    orig_judge = ts.ServiceAgainstAggregates.judge

    def judge(self, task_id, won, before, command):
        import inspect

        caller = inspect.stack()[1].function
        CALLS[(caller, won)] += 1
        return orig_judge(self, task_id, won, before, command)

    monkeypatch.setattr(ts.ServiceAgainstAggregates, "judge", judge)
    with FlowForge(postgres_url) as app, psycopg.connect(postgres_url, autocommit=True) as clock:
        ts.ServiceAgainstAggregates.app = app
        ts.ServiceAgainstAggregates.url = postgres_url
        ts.ServiceAgainstAggregates.clock = clock
        run_state_machine_as_test(
            ts.ServiceAgainstAggregates,
            settings=settings(ts.SETTINGS, database=None, phases=[Phase.generate]),
        )
    print(sorted(CALLS.items()))
