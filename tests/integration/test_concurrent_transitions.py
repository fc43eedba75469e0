"""Races on one row, decided by PostgreSQL's row locks, provoked with real threads.

Every racer waits on one ``threading.Barrier`` and then makes its call, so the calls hit
the database together; nothing sleeps to widen a window (docs/execution-model.md, "The
transition protocol"). Each test counts winners and events, so a double win, a lost
winner or a stray event fails it. Exceptions in a racing thread are collected and raised
in the test's thread.

The only waiting is for the database's clock to pass a tiny lease (polling
``expired_leases()`` with a deadline); PostgreSQL's clock is the one that decides leases.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from uuid import UUID

import pytest

from flowforge.app.service import FlowForge
from flowforge.projections.db.protocols import Transaction
from flowforge.projections.reads import Reads
from tests.helpers import claim, race, succeed_leaving_a_mark, wait_until_expired

pytestmark = pytest.mark.postgres

LEASE_S = 30.0
TINY_LEASE_S = 0.05
#: How long a racer may wait at the barrier or a test for its racers, before it fails.
RACE_TIMEOUT_S = 30.0
CLAIMERS = 16
#: Rounds of the races whose outcome the database may decide either way.
ROUNDS = 10
#: Rounds of the heartbeat-against-finish race (the trap in ARCHITECTURE.md).
HEARTBEAT_ROUNDS = 30
#: Rounds of a user's cancel against the scheduler's start.
CANCEL_ROUNDS = 25
CHAIN = {
    "name": "cancel_race",
    "tasks": [{"key": "a", "type": "t"}, {"key": "b", "type": "t", "depends_on": ["a"]}],
}
SINGLE = {"name": "cancel_finish_race", "tasks": [{"key": "only", "type": "t"}]}
ERROR = {"type": "TimeoutError", "message": "slow", "traceback": ""}


def start_tasks(app: FlowForge, count: int) -> list[UUID]:
    """``count`` independent tasks of one new run, all created ready."""
    definition = {
        "name": "race",
        "retry": {"max_attempts": 3, "backoff_seconds": 0.0, "jitter": 0.0},
        "tasks": [{"key": f"task_{i:02d}", "type": "noop"} for i in range(count)],
    }
    run_id = app.start_workflow_run(definition)
    return [t.id for t in sorted(app.task_runs(run_id), key=lambda t: t.task_key)]


def start_chain(app: FlowForge) -> tuple[UUID, UUID, UUID]:
    """A new run of root -> child: (run, root ready, child pending)."""
    definition = {
        "name": "chain",
        "tasks": [
            {"key": "root", "type": "noop"},
            {"key": "child", "type": "noop", "depends_on": ["root"]},
        ],
    }
    run_id = app.start_workflow_run(definition)
    tasks = {t.task_key: t.id for t in app.task_runs(run_id)}
    return run_id, tasks["root"], tasks["child"]


def run_transitions(app: FlowForge, run_id: UUID) -> list[str]:
    return [e.transition for e in app.run_history(run_id) if e.aggregate == "WorkflowRun"]


def transitions(app: FlowForge, task_run_id: UUID) -> list[str]:
    return [e.transition for e in app.history(task_run_id)]


class TestClaimRace:
    def test_sixteen_workers_claiming_one_ready_task_produce_exactly_one_claim(
        self, pg_app: FlowForge
    ) -> None:
        for task_run_id in start_tasks(pg_app, 3):
            before = pg_app.get_task_run(task_run_id)
            workers = [f"worker-{i}" for i in range(CLAIMERS)]
            claims = race(
                *(partial(pg_app.claim_task_run, task_run_id, w, LEASE_S) for w in workers)
            )

            won = [(w, c) for w, c in zip(workers, claims, strict=True) if c is not None]
            assert len(won) == 1, f"{len(won)} workers won one claim"
            ((winner, winning),) = won
            row = pg_app.get_task_run(task_run_id)
            assert winning.fencing_token == before.fencing_token + 1 == row.fencing_token
            assert (row.state, row.lease_owner) == ("running", winner)
            claim_events = [e for e in pg_app.history(task_run_id) if e.transition == "claim"]
            assert [(e.actor, e.fencing_token) for e in claim_events] == [
                (winner, winning.fencing_token)
            ]
            assert row.version == before.version + 1


class TestReaperRaces:
    def test_two_reapers_racing_on_one_expired_lease_reclaim_it_exactly_once(
        self, pg_app: FlowForge
    ) -> None:
        task_run_ids = start_tasks(pg_app, ROUNDS)
        tokens = {
            t: claim(pg_app, t, "worker-1", TINY_LEASE_S).fencing_token for t in task_run_ids
        }
        wait_until_expired(pg_app, *task_run_ids)
        for task_run_id in task_run_ids:
            reaped = race(
                partial(pg_app.reclaim_task_run, task_run_id),
                partial(pg_app.reclaim_task_run, task_run_id),
            )
            assert sorted(reaped) == [False, True]
            row = pg_app.get_task_run(task_run_id)
            assert (row.state, row.fencing_token) == ("ready", tokens[task_run_id] + 1)
            assert transitions(pg_app, task_run_id).count("reap_lease") == 1
            assert [d.fencing_token for d in pg_app.dispatches_of(task_run_id)] == [
                0,
                tokens[task_run_id] + 1,
            ]

    def test_a_reaper_and_a_renew_on_an_expired_lease_have_one_winner_and_the_row_follows_it(
        self, pg_app: FlowForge
    ) -> None:
        task_run_ids = start_tasks(pg_app, ROUNDS)
        tokens = {
            t: claim(pg_app, t, "worker-1", TINY_LEASE_S).fencing_token for t in task_run_ids
        }
        wait_until_expired(pg_app, *task_run_ids)
        for task_run_id in task_run_ids:
            token = tokens[task_run_id]
            reaped, renewed = race(
                partial(pg_app.reclaim_task_run, task_run_id),
                partial(pg_app.renew_lease, task_run_id, token, LEASE_S),
            )
            assert reaped != renewed, "the reaper and the renew both won, or both lost"
            row, log = pg_app.get_task_run(task_run_id), transitions(pg_app, task_run_id)
            if renewed:
                assert (row.state, row.fencing_token, row.lease_owner) == (
                    "running",
                    token,
                    "worker-1",
                )
                assert task_run_id not in pg_app.expired_leases()
                assert log == ["create", "claim", "renew_lease"]
            else:
                assert (row.state, row.fencing_token, row.lease_expires_at) == (
                    "ready",
                    token + 1,
                    None,
                )
                assert log == ["create", "claim", "reap_lease"]

    def test_a_reaper_and_a_finish_on_an_expired_lease_have_exactly_one_winner(
        self, pg_app: FlowForge
    ) -> None:
        task_run_ids = start_tasks(pg_app, ROUNDS)
        tokens = {
            t: claim(pg_app, t, "worker-1", TINY_LEASE_S).fencing_token for t in task_run_ids
        }
        wait_until_expired(pg_app, *task_run_ids)
        for task_run_id in task_run_ids:
            token = tokens[task_run_id]
            reaped, finished = race(
                partial(pg_app.reclaim_task_run, task_run_id),
                partial(pg_app.finish_task_run, task_run_id, token, "succeed", {"n": token}),
            )
            assert reaped != finished, "the reaper and the finish both won, or both lost"
            row, log = pg_app.get_task_run(task_run_id), transitions(pg_app, task_run_id)
            if finished:
                assert (row.state, row.fencing_token, row.result) == (
                    "succeeded",
                    token,
                    {"n": token},
                )
                assert log == ["create", "claim", "succeed"]
            else:
                assert (row.state, row.fencing_token, row.result) == ("ready", token + 1, None)
                assert log == ["create", "claim", "reap_lease"]


class TestHeartbeatAgainstFinish:
    def test_a_heartbeat_racing_a_finish_with_the_same_token_never_makes_the_finish_lose(
        self, pg_app: FlowForge
    ) -> None:
        task_run_ids = start_tasks(pg_app, HEARTBEAT_ROUNDS)
        tokens = {t: claim(pg_app, t, "worker-1").fencing_token for t in task_run_ids}
        renew_wins = 0
        for round_, task_run_id in enumerate(task_run_ids):
            token = tokens[task_run_id]
            renewed, finished = race(
                partial(pg_app.renew_lease, task_run_id, token, LEASE_S),
                partial(pg_app.finish_task_run, task_run_id, token, "succeed", {"round": round_}),
            )
            assert finished is True, f"round {round_}: the heartbeat made the finish lose"
            row = pg_app.get_task_run(task_run_id)
            assert (row.state, row.fencing_token, row.result) == (
                "succeeded",
                token,
                {"round": round_},
            )
            assert (row.lease_owner, row.lease_expires_at) == (None, None)
            # The heartbeat either landed before the finish or found the row finished. The
            # log is read in version order here: history()'s own order under this race is
            # TestAuditOrder's subject.
            expected = ["create", "claim", *(["renew_lease"] if renewed else []), "succeed"]
            log = sorted(pg_app.history(task_run_id), key=lambda e: e.version)
            assert [e.transition for e in log] == expected
            renew_wins += renewed
        assert 0 <= renew_wins <= HEARTBEAT_ROUNDS


class TestPromotionAgainstCancel:
    def test_promoting_and_cancelling_one_pending_task_have_one_winner_and_one_event(
        self, pg_app: FlowForge
    ) -> None:
        for _ in range(ROUNDS):
            _, _, child = start_chain(pg_app)
            promoted, cancelled = race(
                partial(pg_app.transition_task_run, child, "dependencies_satisfied"),
                partial(pg_app.transition_task_run, child, "cancel_pending"),
            )
            assert promoted != cancelled, "promotion and cancellation both won, or both lost"
            winner = "dependencies_satisfied" if promoted else "cancel_pending"
            assert transitions(pg_app, child) == ["create", winner]
            assert pg_app.get_task_run(child).state == ("ready" if promoted else "cancelled")
            assert len(pg_app.dispatches_of(child)) == int(promoted)

    def test_the_scheduler_advancing_a_run_and_a_user_cancelling_its_pending_task_have_one_winner(
        self, pg_app: FlowForge
    ) -> None:
        for _ in range(ROUNDS):
            run_id, root, child = start_chain(pg_app)
            won = claim(pg_app, root, "worker-1")
            succeed_leaving_a_mark(pg_app, root, won.fencing_token)
            advanced, cancelled = race(
                partial(pg_app.advance_workflow_run, run_id),
                partial(pg_app.transition_task_run, child, "cancel_pending"),
            )
            promoted = "child" in advanced.promoted
            assert promoted != cancelled, "promotion and cancellation both won, or both lost"
            winner = "dependencies_satisfied" if promoted else "cancel_pending"
            assert transitions(pg_app, child) == ["create", winner]
            assert len(pg_app.dispatches_of(child)) == int(promoted)


class TestCancelAgainstTheScheduler:
    """A user's cancel is one conditional write over pending AND running: a scheduler
    starting the run at the same moment cannot make it lose (spec: cancellation wins
    over any concurrent outcome; a lost race never raises)."""

    def test_a_cancel_racing_the_scheduler_starting_the_run_always_cancels_it(
        self, app: FlowForge
    ) -> None:
        edges = set()
        for _ in range(CANCEL_ROUNDS):
            run_id = app.start_workflow_run(CHAIN)
            cancelled, _ = race(
                partial(app.cancel_workflow_run, run_id),
                partial(app.advance_workflow_run, run_id),
            )
            assert cancelled is True, "the cancel lost to the scheduler's start"
            assert app.get_workflow_run(run_id).state == "cancelled"
            log = run_transitions(app, run_id)
            # The edge recorded is the one the row really took, whichever won.
            assert log in (["create", "cancel_before_start"], ["create", "start", "cancel"])
            edges.add(log[-1])
            assert {t.state for t in app.task_runs(run_id)} == {"cancelled"}
            assert app.cancel_workflow_run(run_id) is False  # idempotent, never raises
        assert edges  # each round recorded its edge (which one is the database's call)

    def test_a_cancel_racing_a_finish_never_leaves_a_cancelled_answer_on_a_finished_run(
        self, app: FlowForge
    ) -> None:
        for _ in range(ROUNDS):
            run_id = app.start_workflow_run(SINGLE)
            app.advance_workflow_run(run_id)
            (task,) = app.task_runs(run_id)
            won = claim(app, task.id, "worker-1")

            def finish_and_advance(
                r: UUID = run_id, t: UUID = task.id, token: int = won.fencing_token
            ) -> bool:
                finished = app.finish_task_run(t, token, "succeed")
                app.advance_workflow_run(r)
                return finished

            cancelled, finished = race(
                partial(app.cancel_workflow_run, run_id), finish_and_advance
            )
            run = app.get_workflow_run(run_id)
            # The cancel wins unless the run had already ended before it was written.
            assert run.state == ("cancelled" if cancelled else "succeeded")
            assert finished or cancelled
            if not cancelled:
                assert run_transitions(app, run_id) == ["create", "start", "succeed"]


class TestFencing:
    """The spec's scenario ("Fencing tokens"), step by step."""

    def test_a_worker_whose_lease_was_reaped_cannot_overwrite_the_attempt_after_it(
        self, pg_app: FlowForge
    ) -> None:
        (task_run_id,) = start_tasks(pg_app, 1)

        # 1. Worker A claims the task and gets token n.
        a = claim(pg_app, task_run_id, "worker-A", TINY_LEASE_S)
        n = a.fencing_token
        # 2. A stalls; its lease expires by the database's clock.
        wait_until_expired(pg_app, task_run_id)
        # 3. The reaper reclaims the task; its edge bumps the token too (reap_lease, token + 1).
        assert pg_app.reap_expired_leases() == [task_run_id]
        reaped = pg_app.get_task_run(task_run_id)
        assert (reaped.state, reaped.fencing_token, reaped.lease_owner) == ("ready", n + 1, None)
        # ... and worker B claims it, with a newer token than A's.
        b = claim(pg_app, task_run_id, "worker-B")
        assert b.fencing_token == reaped.fencing_token + 1 > n
        assert b.attempt == a.attempt

        # 4. A wakes up and writes its result: discarded, nothing changes, nothing appended.
        before, log = pg_app.get_task_run(task_run_id), pg_app.history(task_run_id)
        assert pg_app.finish_task_run(task_run_id, n, "succeed", {"by": "A"}, actor="A") is False
        assert pg_app.finish_task_run(task_run_id, n, "fail", None, ERROR, actor="A") is False
        assert pg_app.renew_lease(task_run_id, n, LEASE_S, actor="worker-A") is False
        assert pg_app.get_task_run(task_run_id) == before
        assert pg_app.history(task_run_id) == log

        # B's finish is recorded.
        assert pg_app.finish_task_run(
            task_run_id, b.fencing_token, "succeed", {"by": "B"}, actor="worker-B"
        )
        row = pg_app.get_task_run(task_run_id)
        assert (row.state, row.fencing_token, row.result) == (
            "succeeded",
            b.fencing_token,
            {"by": "B"},
        )

        # The log keeps both attempts, each with its own token.
        assert [(e.transition, e.actor, e.fencing_token) for e in pg_app.history(task_run_id)] == [
            ("create", "user", 0),
            ("claim", "worker-A", n),
            ("reap_lease", "reaper", n + 1),
            ("claim", "worker-B", b.fencing_token),
            ("succeed", "worker-B", b.fencing_token),
        ]


class TestLeaseReaper:
    def test_the_reaper_reclaims_only_expired_leases(self, pg_app: FlowForge) -> None:
        short, long = start_tasks(pg_app, 2)
        claim(pg_app, short, "worker-short", TINY_LEASE_S)
        held = claim(pg_app, long, "worker-long", LEASE_S)
        wait_until_expired(pg_app, short)
        assert pg_app.reap_expired_leases() == [short]
        row = pg_app.get_task_run(long)
        assert (row.state, row.fencing_token, row.lease_owner) == (
            "running",
            held.fencing_token,
            "worker-long",
        )
        assert "reap_lease" not in transitions(pg_app, long)
        assert pg_app.get_task_run(short).state == "ready"
        assert pg_app.reap_expired_leases() == []

    def test_a_renewed_lease_is_not_reaped(self, pg_app: FlowForge) -> None:
        renewed, control = start_tasks(pg_app, 2)
        held = claim(pg_app, renewed, "worker-renewing", TINY_LEASE_S)
        # Claimed after ``renewed`` with the same lease: once the control's lease has
        # expired by the database's clock, the renewed task's original lease has too.
        claim(pg_app, control, "worker-control", TINY_LEASE_S)
        assert pg_app.renew_lease(renewed, held.fencing_token, LEASE_S, actor="worker-renewing")
        wait_until_expired(pg_app, control)
        assert pg_app.reap_expired_leases() == [control]
        row = pg_app.get_task_run(renewed)
        assert (row.state, row.fencing_token) == ("running", held.fencing_token)
        assert transitions(pg_app, renewed) == ["create", "claim", "renew_lease"]

    def test_a_reaped_workers_renew_returns_false(self, pg_app: FlowForge) -> None:
        (task_run_id,) = start_tasks(pg_app, 1)
        held = claim(pg_app, task_run_id, "worker-1", TINY_LEASE_S)
        wait_until_expired(pg_app, task_run_id)
        assert pg_app.reclaim_task_run(task_run_id)
        reaped, log = pg_app.get_task_run(task_run_id), pg_app.history(task_run_id)
        assert pg_app.renew_lease(task_run_id, held.fencing_token, LEASE_S) is False
        assert pg_app.get_task_run(task_run_id) == reaped
        assert pg_app.history(task_run_id) == log
        assert (reaped.state, reaped.fencing_token) == ("ready", held.fencing_token + 1)


class TestAuditOrder:
    def test_history_keeps_version_order_when_the_transaction_that_began_first_commits_last(
        self, pg_app: FlowForge, postgres_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # Deterministic form of what the heartbeat race above shows now and then: the
        # finish's transaction begins, the heartbeat (another process) commits, then the
        # finish writes. Events, not sleeps, order the steps.
        (task_run_id,) = start_tasks(pg_app, 1)
        held = claim(pg_app, task_run_id, "worker-1")
        began, resume = threading.Event(), threading.Event()
        begin = pg_app.database.transaction

        @contextlib.contextmanager
        def stalled_after_begin() -> Iterator[Transaction]:
            with begin() as tx:
                Reads(tx).now()  # the transaction is open: its now() is fixed from here
                began.set()
                assert resume.wait(RACE_TIMEOUT_S)
                yield tx

        with monkeypatch.context() as patch, ThreadPoolExecutor(1) as pool:
            patch.setattr(pg_app.database, "transaction", stalled_after_begin)
            finishing = pool.submit(
                pg_app.finish_task_run, task_run_id, held.fencing_token, "succeed"
            )
            assert began.wait(RACE_TIMEOUT_S)
            with FlowForge(postgres_url) as heartbeat_process:
                assert heartbeat_process.renew_lease(task_run_id, held.fencing_token, LEASE_S)
            resume.set()
            assert finishing.result(RACE_TIMEOUT_S) is True

        history = pg_app.history(task_run_id)
        assert [(e.version, e.transition) for e in history] == [
            (1, "create"),
            (2, "claim"),
            (3, "renew_lease"),
            (4, "succeed"),
        ]
