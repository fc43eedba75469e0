import psycopg
import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from flowforge.app.service import FlowForge
from flowforge.projections import queries
from tests.integration.test_stateful import SETTINGS, ServiceAgainstAggregates

MUTANTS = {
    "reclaim_no_bump": ("task_reclaim", "fencing_token = fencing_token + 1, ", ""),
    "finish_no_token": ("task_finish", "AND fencing_token = %(fencing_token)s", ""),
    "claim_resets_started": ("task_claim", "coalesce(started_at, now())", "now()"),
    "retry_keeps_finished": ("task_schedule_retry", "finished_at = NULL, ", ""),
    "renew_any_state": ("task_renew_lease", "AND state = %(source)s", ""),
    "retry_ready_not_due": (
        "task_retry_ready",
        "AND (retry_due_at IS NULL OR retry_due_at <= now())",
        "",
    ),
    "reclaim_early": (
        "task_reclaim",
        "lease_expires_at < now()",
        "lease_expires_at < now() + interval '1 hour 1 second'",
    ),
    "retry_unbounded": ("task_schedule_retry", "AND attempt < max_attempts", ""),
    "finish_keeps_owner": ("task_finish", "lease_owner = NULL, ", ""),
    "claim_short_lease": (
        "task_claim",
        "%(lease_seconds)s * interval '1 second'",
        "%(lease_seconds)s * interval '1 millisecond'",
    ),
    "renew_no_token": ("task_renew_lease", "AND fencing_token = %(fencing_token)s", ""),
    "finish_no_result": ("task_finish", "result = %(result)s, ", ""),
    "cancel_ready_no_finished": (
        "task_move",
        "finished_at = CASE WHEN %(terminal)s THEN now() ELSE finished_at END,",
        "",
    ),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_mutant(mutant, postgres_url, monkeypatch):
    name, old, new = MUTANTS[mutant]
    real = queries.load("postgres")
    assert old in real[name], mutant
    mutated = dict(real)
    mutated[name] = real[name].replace(old, new)
    original = queries.load
    monkeypatch.setattr(queries, "load", lambda d: mutated if d == "postgres" else original(d))
    with FlowForge(postgres_url) as app, psycopg.connect(postgres_url, autocommit=True) as clock:
        ServiceAgainstAggregates.app = app
        ServiceAgainstAggregates.url = postgres_url
        ServiceAgainstAggregates.clock = clock
        run_state_machine_as_test(
            ServiceAgainstAggregates, settings=settings(SETTINGS, database=None, print_blob=False)
        )
