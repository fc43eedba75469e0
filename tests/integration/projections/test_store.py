"""The store's contract: every method of ``Store.read()`` / ``Store.write()``, on both
backends.

The eventsourcing library's per-backend pattern (``AggregateRecorderTestCase`` and its
subclasses): one contract class, :class:`StoreContract`, holds every case; each backend
subclasses it and supplies only the ``store`` fixture. The cases call the store directly,
below the application service: these are the store's promises (typed rows, lost writes
return ``None``, one transaction commits all or nothing), not the one rule's.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest

from flowforge import errors
from flowforge.aggregates import task_run, workflow_run
from flowforge.aggregates.machines import TASK_RUN_MACHINE, WORKFLOW_RUN_MACHINE
from flowforge.aggregates.states import TaskRunState, WorkflowRunState
from flowforge.app.service import FlowForge
from flowforge.projections import schema
from flowforge.projections.store import Store
from flowforge.projections.tables import TaskRunRow, WorkflowRunRow
from flowforge.projections.writes import TASK_EDGE_METHODS, Leaf, LeafSuccess, Writes
from flowforge.projections.writes.tasks import TaskWrites
from tests.conftest import empty_postgres
from tests.helpers import (
    FORGED_TOPIC,
    TASK_CREATED_TOPIC,
    RoundTrip,
    forge_event,
    logged,
    wait_until,
)

LEASE_S = 30.0
TINY_S = 0.05
CLOCK_DEADLINE_S = 5.0
ACTOR = "store-test"
CLAIMED_TOPIC = "flowforge.aggregates.task_run:TaskRun.Claimed"

edge = TASK_RUN_MACHINE.get
run_edge = WORKFLOW_RUN_MACHINE.get


def create_run(
    writes: Writes, *, key: str | None = None, definition: dict[str, Any] | None = None
) -> UUID:
    run_id = uuid4()
    created = workflow_run.created_event(
        run_id,
        at=writes.now(),
        workflow_name="store",
        definition=definition or {"name": "store", "tasks": [{"key": "a", "type": "t"}]},
        inputs={"n": 1},
        idempotency_key=key,
        actor=ACTOR,
    )
    assert writes.rebuild.apply(created)
    writes.recording.append([created])
    return run_id


def create_task(
    writes: Writes,
    run_id: UUID,
    state: TaskRunState,
    key: str = "a",
    *,
    lease_seconds: float | None = LEASE_S,
) -> UUID:
    created = task_run.created_event(
        uuid4(),
        at=writes.now(),
        workflow_run_id=run_id,
        task_key=key,
        task_type="t",
        depends_on=[],
        max_attempts=2,
        lease_seconds=lease_seconds,
        state=state,
        actor=ACTOR,
    )
    writes.rebuild.apply(created)
    writes.recording.append([created])
    return created.originator_id


def succeed_leaf(
    writes: Writes, task_id: UUID, token: int, leaf: Leaf, result: Any = None
) -> TaskRunRow | None:
    (row,) = writes.leaves.succeed([LeafSuccess(task_id, token, leaf, result)], actor="t")
    return row


def claim_while_run_held(store: Store, run_id: UUID, task_id: UUID) -> TaskRunRow:
    """A claim made while another transaction holds the task's run row (PostgreSQL):
    the claim cannot start the run, which stays pending."""
    with store.write() as holder:
        assert holder.runs.lock(run_id) is not None
        with store.write() as writes:
            claimed = writes.tasks.claim(task_id, "w1", LEASE_S)
    assert claimed is not None
    with store.read() as reads:
        run = reads.workflow_run(run_id)
    assert run is not None and run.state == "pending"
    return claimed


def wait_for_clock(store: Store, moment: datetime) -> None:
    """Poll the database's clock (the one that decides) until it passes ``moment``."""

    def passed() -> bool:
        with store.read() as reads:
            return reads.now() > moment

    wait_until(passed, CLOCK_DEADLINE_S, "the database clock passed the moment")


class StoreContract:
    """Every store method; subclasses supply ``store`` for one backend."""

    @pytest.fixture
    def store(self) -> Store:
        raise NotImplementedError

    @pytest.fixture
    def run_and_task(self, store: Store) -> tuple[UUID, UUID]:
        with store.write() as writes:
            run_id = create_run(writes)
            return run_id, create_task(writes, run_id, TaskRunState.READY)

    # --- reads -------------------------------------------------------------------------

    def test_reads_return_typed_rows_and_none_for_an_unknown_id(
        self, store: Store, run_and_task: tuple[UUID, UUID]
    ) -> None:
        run_id, task_id = run_and_task
        with store.read() as reads:
            run, task = reads.workflow_run(run_id), reads.task_run(task_id)
            assert reads.workflow_run(uuid4()) is None and reads.task_run(uuid4()) is None
            assert reads.task_runs_of(run_id) == [task]
            assert reads.recent_runs(10) == [run]
            assert reads.every_run() == [run]
            assert reads.ready_task_runs(10) == [task]
            assert isinstance(reads.now(), datetime) and reads.now().tzinfo is not None
            assert reads.schema_version() == schema.SCHEMA_VERSION
        assert isinstance(run, WorkflowRunRow) and isinstance(task, TaskRunRow)
        assert (run.id, run.state, run.inputs, run.version) == (run_id, "pending", {"n": 1}, 1)
        assert (task.id, task.workflow_run_id, task.state) == (task_id, run_id, "ready")
        assert (task.fencing_token, task.attempt, task.depends_on) == (0, 1, [])

    def test_task_run_and_its_run_leaves_out_a_known_run(
        self, store: Store, run_and_task: tuple[UUID, UUID]
    ) -> None:
        run_id, task_id = run_and_task
        with store.read() as reads:
            task, run = reads.task_run_and_its_run(task_id, [])
            assert task is not None and task.id == task_id
            assert run is not None and run.id == run_id and run.definition["name"] == "store"
            assert reads.task_run_and_its_run(task_id, [uuid4(), run_id]) == (task, None)
            assert reads.task_run_and_its_run(uuid4(), []) == (None, None)

    def test_task_results_reads_only_the_named_tasks_of_the_named_run(self, store: Store) -> None:
        with store.write() as writes:
            run_id, other_run = create_run(writes), create_run(writes)
            done = {key: create_task(writes, run_id, TaskRunState.READY, key) for key in "abc"}
            create_task(writes, other_run, TaskRunState.READY, "a")
            for key, value in (("a", {"v": 1}), ("b", [2.5, None])):
                token = writes.tasks.claim(done[key], "w", LEASE_S)
                assert token is not None
                writes.tasks.finish(
                    done[key], edge("succeed"), token.fencing_token, result=value, actor="test"
                )
        with store.read() as reads:
            assert reads.task_results(run_id, ["a", "c", "zz"]) == {"a": {"v": 1}, "c": None}
            assert reads.task_results(run_id, ("b",)) == {"b": [2.5, None]}
            assert reads.task_results(other_run, ["a", "b"]) == {"a": None}

    def test_a_write_transaction_that_raises_writes_nothing(self, store: Store) -> None:
        created: list[UUID] = []

        def abandoned() -> None:
            with store.write() as writes:
                created.append(create_run(writes))
                raise RuntimeError("abandon")

        with pytest.raises(RuntimeError, match="abandon"):
            abandoned()
        (run_id,) = created
        with store.read() as reads:
            assert reads.workflow_run(run_id) is None
            assert reads.recent_runs(10) == []

    def test_a_deferred_write_that_fails_rolls_back_its_whole_transaction(
        self, store: Store, run_and_task: tuple[UUID, UUID]
    ) -> None:
        # An appended event is deferred (on PostgreSQL it goes out with the COMMIT): its
        # error, the events' primary key refusing a second event at the version the
        # claim already recorded, must still undo the claim written before it.
        _, task_id = run_and_task

        def claim_with_two_events() -> None:
            with store.write() as writes:
                claimed = writes.tasks.claim(task_id, "w1", LEASE_S)
                assert claimed is not None
                writes.recording.append([_claimed_event(claimed)])

        with pytest.raises(errors.PersistenceError):
            claim_with_two_events()
        with store.read() as reads:
            task = reads.task_run(task_id)
        assert task is not None and (task.state, task.fencing_token) == ("ready", 0)
        with store.write() as writes:
            assert [
                s.topic for s in writes.rebuild.stored_events() if s.originator_id == task_id
            ] == ["flowforge.aggregates.task_run:TaskRun.Created"]
            assert writes.tasks.claim(task_id, "w1", LEASE_S) is not None  # the row is usable

    def test_an_edge_whose_event_version_is_taken_fails_and_leaves_its_row_as_it_was(
        self, store: Store, run_and_task: tuple[UUID, UUID]
    ) -> None:
        # An event already at the version the finish would record: the finish's own
        # event insert must fail it whole (PostgreSQL: inside the finish's statement),
        # never skip the conflict and commit the row with no event.
        run_id, task_id = run_and_task
        with store.write() as writes:
            claimed = writes.tasks.claim(task_id, "w1", LEASE_S)
        assert claimed is not None
        forge_event(store, task_id, claimed.version + 1)
        with store.read() as reads:
            before = (reads.task_run(task_id), reads.workflow_run(run_id), reads.wakeup_count())

        def finish() -> None:
            with store.write() as writes:
                succeed = edge("succeed")
                writes.tasks.finish(task_id, succeed, claimed.fencing_token, actor=ACTOR, result=1)

        with pytest.raises(errors.PersistenceError):
            finish()
        with store.read() as reads:
            after = (reads.task_run(task_id), reads.workflow_run(run_id), reads.wakeup_count())
        assert after == before
        task = after[0]
        assert task is not None and (task.state, task.fencing_token) == ("running", 1)
        topics = [topic for _, topic in logged(store, task_id)]
        assert topics == [TASK_CREATED_TOPIC, CLAIMED_TOPIC, FORGED_TOPIC]

    def test_a_transaction_sent_whole_that_fails_in_a_later_statement_writes_nothing(
        self, store: Store, run_and_task: tuple[UUID, UUID], round_trips: list[RoundTrip]
    ) -> None:
        # A transaction nothing of which was sent before its last statement goes in ONE
        # round trip with no BEGIN on PostgreSQL: its pipeline's Sync commits it. Here a
        # deferred mark, then the service's claim (the claim, then its run's start), and
        # the start fails (an event is already at the run's next version): the mark and
        # the claim before it must be undone with it, not committed each on its own.
        run_id, task_id = run_and_task
        forge_event(store, run_id, 2)
        with store.read() as reads:
            before = (reads.task_run(task_id), reads.workflow_run(run_id), reads.wakeup_count())
        round_trips.clear()

        def mark_and_claim() -> None:
            with store.write() as writes:
                writes.marks.mark(run_id)
                writes.tasks.claim(task_id, "w1", LEASE_S, last=True)

        with pytest.raises(errors.PersistenceError):
            mark_and_claim()
        sent = [trip.text.split(b";\n") for trip in round_trips]
        with store.read() as reads:
            after = (reads.task_run(task_id), reads.workflow_run(run_id), reads.wakeup_count())
        assert after == before
        task = after[0]
        assert task is not None and (task.state, task.fencing_token) == ("ready", 0)
        assert [topic for _, topic in logged(store, task_id)] == [TASK_CREATED_TOPIC]
        if store.dialect == "postgres":
            # It was the implicit transaction: the mark, the claim and the run's start in
            # one round trip, no BEGIN, no COMMIT.
            assert len(sent) == 1 and len(sent[0]) == 3, sent
            assert b"BEGIN" not in sent[0] and b"COMMIT" not in sent[0]

    # --- the event log and creation ----------------------------------------------------

    def test_appended_events_read_back_in_order(self, store: Store) -> None:
        with store.write() as writes:
            run_id = create_run(writes)
            task_id = create_task(writes, run_id, TaskRunState.PENDING)
            stored = writes.rebuild.stored_events()
        assert [(s.originator_id, s.originator_version) for s in stored] == [
            (run_id, 1),
            (task_id, 1),
        ]
        assert stored[0].topic.endswith("WorkflowRun.Created")

    def test_a_second_run_with_the_same_idempotency_key_is_not_inserted(
        self, store: Store
    ) -> None:
        with store.write() as writes:
            first = create_run(writes, key="nightly")
        with store.write() as writes:
            again = workflow_run.created_event(
                uuid4(),
                at=writes.now(),
                workflow_name="store",
                definition={},
                inputs={},
                idempotency_key="nightly",
                actor=ACTOR,
            )
            assert writes.rebuild.apply(again) is False
            assert writes.runs.id_by_idempotency_key("nightly") == first

    def test_a_run_row_that_cannot_be_inserted_fails_its_whole_creation(
        self, store: Store
    ) -> None:
        # Without an idempotency key the run's row is not waited for (PostgreSQL sends
        # it with the rest of the creation, the COMMIT here); a row refused all the same
        # (here a reused id) must still undo the task created in its transaction.
        with store.write() as writes:
            run_id = create_run(writes)
        tasks: list[UUID] = []

        def create_again() -> None:
            with store.write() as writes:
                tasks.append(create_task(writes, run_id, TaskRunState.READY))
                again = workflow_run.created_event(
                    run_id,
                    at=writes.now(),
                    workflow_name="again",
                    definition={},
                    inputs={},
                    idempotency_key=None,
                    actor=ACTOR,
                )
                writes.rebuild.apply(again)

        with pytest.raises(errors.PersistenceError):
            create_again()
        with store.read() as reads:
            run = reads.workflow_run(run_id)
            assert run is not None and run.workflow_name == "store"
            assert reads.task_run(tasks[0]) is None

    # --- task transitions: each one conditional write ----------------------------------

    def test_every_task_edge_has_one_store_method(self) -> None:
        assert set(TASK_EDGE_METHODS) == {t.name for t in TASK_RUN_MACHINE}
        assert all(callable(getattr(TaskWrites, m)) for m in TASK_EDGE_METHODS.values())

    def test_claim_sets_token_lease_and_start_and_a_second_claim_loses(
        self, store: Store, run_and_task: tuple[UUID, UUID]
    ) -> None:
        _, task_id = run_and_task
        with store.write() as writes:
            claimed = writes.tasks.claim(task_id, "w1", LEASE_S)
            now = writes.now()
        assert claimed is not None and claimed.state == "running"
        assert (claimed.fencing_token, claimed.lease_owner, claimed.version) == (1, "w1", 2)
        assert claimed.lease_expires_at is not None and claimed.started_at is not None
        assert claimed.lease_expires_at - now > timedelta(seconds=LEASE_S - 5)
        with store.write() as writes:
            assert writes.tasks.claim(task_id, "w2", LEASE_S) is None

    def test_a_claim_without_a_lease_takes_the_rows_own(self, store: Store) -> None:
        with store.write() as writes:
            task_id = create_task(writes, create_run(writes), TaskRunState.READY, lease_seconds=7)
        with store.write() as writes:
            claimed = writes.tasks.claim(task_id, "w1", None)
            now = writes.now()
        assert claimed is not None and claimed.lease_seconds == 7
        assert claimed.lease_expires_at is not None
        assert timedelta(seconds=2) < claimed.lease_expires_at - now <= timedelta(seconds=7)

    def test_a_row_without_a_lease_is_claimed_only_with_one_given(self, store: Store) -> None:
        with store.write() as writes:
            task_id = create_task(
                writes, create_run(writes), TaskRunState.READY, lease_seconds=None
            )
        with store.write() as writes:
            assert writes.tasks.claim(task_id, "w1", None) is None
        with store.read() as reads:
            row = reads.task_run(task_id)
            assert row is not None and row.state == "ready" and row.lease_expires_at is None
        with store.write() as writes:
            claimed = writes.tasks.claim(task_id, "w1", LEASE_S)
        assert claimed is not None and claimed.lease_expires_at is not None

    def test_a_claim_with_runs_claims_and_reads_an_unknown_run_in_one_go(
        self, store: Store, run_and_task: tuple[UUID, UUID]
    ) -> None:
        run_id, task_id = run_and_task
        with store.write() as writes:
            (claimed,), (run,) = writes.tasks.claims_with_runs([task_id], "w1", [uuid4()])
        assert claimed is not None and claimed.state == "running"
        assert claimed.lease_owner == "w1" and claimed.fencing_token == 1
        assert run is not None and run.id == run_id and run.definition["name"] == "store"
        with store.write() as writes:
            assert writes.tasks.claims_with_runs([task_id], "w2", []) == ([None], [run])
            assert writes.tasks.claims_with_runs([task_id], "w2", [run_id]) == ([None], [])
            assert writes.tasks.claims_with_runs([uuid4()], "w2", []) == ([None], [])

    def test_missing_task_leases_come_from_their_runs_definition(self, store: Store) -> None:
        definition = {
            "name": "leases",
            "lease_seconds": 40.0,
            "tasks": [
                {"key": "own", "type": "t", "lease_seconds": 12.5},
                {"key": "inherits", "type": "t", "lease_seconds": None},
            ],
        }
        with store.write() as writes:
            run_id = create_run(writes, definition=definition)
            ids = {
                key: create_task(writes, run_id, TaskRunState.READY, key, lease_seconds=None)
                for key in ("own", "inherits")
            }
            kept = create_task(writes, run_id, TaskRunState.READY, "kept", lease_seconds=3)
            writes.rebuild.fill_missing_task_leases()
        with store.read() as reads:
            leases = {
                key: row.lease_seconds
                for key, task_id in [*ids.items(), ("kept", kept)]
                if (row := reads.task_run(task_id)) is not None
            }
        assert leases == {"own": 12.5, "inherits": 40.0, "kept": 3}

    def test_finish_needs_the_current_token_and_stores_result_or_error(
        self, store: Store, run_and_task: tuple[UUID, UUID]
    ) -> None:
        _, task_id = run_and_task
        with store.write() as writes:
            claimed = writes.tasks.claim(task_id, "w1", LEASE_S)
            assert claimed is not None
            stale = writes.tasks.finish(
                task_id, edge("succeed"), claimed.fencing_token + 1, actor="test"
            )
            done = writes.tasks.finish(
                task_id,
                edge("succeed"),
                claimed.fencing_token,
                result={"rows": [1, 2]},
                actor="test",
            )
        assert stale is None
        assert done is not None and done.state == "succeeded"
        assert done.result == {"rows": [1, 2]} and done.error is None
        assert done.lease_expires_at is None and done.finished_at is not None

    def test_finish_trying_run_locks_the_run_and_finishes_in_one_go(
        self, store: Store, run_and_task: tuple[UUID, UUID]
    ) -> None:
        run_id, task_id = run_and_task
        with store.write() as writes:
            claimed = writes.tasks.claim(task_id, "w1", LEASE_S)
            assert claimed is not None
            stale = writes.tasks.finish_trying_run(
                task_id, edge("succeed"), claimed.fencing_token + 1, try_run=True, actor="test"
            )
            state, done = writes.tasks.finish_trying_run(
                task_id,
                edge("succeed"),
                claimed.fencing_token,
                try_run=True,
                result=[1],
                actor="test",
            )
        # The run was tried (the claim had started it); the stale finish lost.
        assert stale == (WorkflowRunState.RUNNING, None)
        assert state is WorkflowRunState.RUNNING
        assert done is not None and (done.state, done.result) == ("succeeded", [1])
        with store.write() as writes:
            assert (
                writes.runs.move(run_id, run_edge("succeed"), actor=ACTOR) is not None
            )  # row usable
            with pytest.raises(ValueError, match="finish takes"):
                writes.tasks.finish_trying_run(
                    task_id, edge("claim"), 0, try_run=True, actor="test"
                )

    def test_succeed_leaf_settles_a_pending_run_in_one_go_where_events_are_built_in_sql(
        self, store: Store, run_and_task: tuple[UUID, UUID]
    ) -> None:
        run_id, task_id = run_and_task
        leaf = Leaf(run_id, "a", "a")
        if not store.events_in_sql:  # SQLite: no row locks or transaction ids
            with store.write() as writes:
                claimed = writes.tasks.claim(task_id, "w1", LEASE_S)
                assert claimed is not None
                with pytest.raises(TypeError, match="events in SQL"):
                    succeed_leaf(writes, task_id, claimed.fencing_token, leaf)
            return
        claimed = claim_while_run_held(store, run_id, task_id)
        with store.write() as writes:
            stale = succeed_leaf(writes, task_id, claimed.fencing_token + 1, leaf)
        assert stale is None
        with store.write() as writes:
            done = succeed_leaf(writes, task_id, claimed.fencing_token, leaf, result={"n": 1})
        assert done is not None and (done.state, done.result) == ("succeeded", {"n": 1})
        with store.read() as reads:
            run = reads.workflow_run(run_id)
            assert run is not None and run.state == "succeeded" and run.started_at is not None
            assert reads.wakeup_count() == 0  # settled: nobody to wake
        # Every row written has its event, at the row's version.
        task_events = [(v, topic.rsplit(".", 1)[1]) for v, topic in logged(store, task_id)]
        assert task_events == [(1, "Created"), (2, "Claimed"), (3, "Succeeded")]
        assert done.version == 3
        run_events = [(v, topic.rsplit(".", 1)[1]) for v, topic in logged(store, run_id)]
        assert run_events == [(1, "Created"), (2, "Started"), (3, "Succeeded")]
        assert run.version == 3

    def test_start_run_starts_a_pending_run_and_says_whether_its_tasks_moved(
        self, store: Store, run_and_task: tuple[UUID, UUID]
    ) -> None:
        run_id, _ = run_and_task
        with store.write() as writes:
            started, moved = writes.runs.start(run_id, actor=ACTOR)
            assert started is not None and started.state == "running" and not moved
            assert started.started_at is not None
            assert writes.runs.start(run_id, actor=ACTOR) == (None, False)  # not pending any more
            other = create_run(writes)
            task_id = create_task(writes, other, TaskRunState.PENDING)
            assert writes.tasks.move(task_id, edge("dependencies_satisfied"), actor="t")
            started, moved = writes.runs.start(other, actor=ACTOR)
        assert started is not None and moved

    def test_a_claim_starts_its_pending_run_once(self, store: Store) -> None:
        with store.write() as writes:
            run_id = create_run(writes)
            first, second = (create_task(writes, run_id, TaskRunState.READY, k) for k in "ab")
            assert writes.tasks.claim(first, "w1", LEASE_S) is not None
            started = writes.runs.lock(run_id)
            assert started is not None and started.state == "running"
            assert (started.version, started.started_at is not None) == (2, True)
            assert writes.tasks.claim(second, "w1", LEASE_S) is not None
            again = writes.runs.lock(run_id)
            assert again is not None and again.version == 2  # started once, not twice
        with store.write() as writes:
            topics = [s.topic for s in writes.rebuild.stored_events() if s.originator_id == run_id]
        assert [topic.rsplit(".", 1)[1] for topic in topics] == ["Created", "Started"]

    def test_succeed_run_when_complete_takes_the_edge_only_once_every_task_succeeded(
        self, store: Store
    ) -> None:
        with store.write() as writes:
            run_id = create_run(writes)
            first, second = (create_task(writes, run_id, TaskRunState.READY, k) for k in "ab")
            assert writes.runs.succeed_when_complete(run_id, actor=ACTOR) == ("unfinished", None)
            for task_id in (first, second):
                claimed = writes.tasks.claim(task_id, "w1", LEASE_S)  # the first started the run
                assert claimed is not None
                writes.tasks.finish(task_id, edge("succeed"), claimed.fencing_token, actor="test")
            completion, row = writes.runs.succeed_when_complete(run_id, actor=ACTOR)
            # Complete, but the run is no longer running: the edge's source does not match.
            assert writes.runs.succeed_when_complete(run_id, actor=ACTOR) == ("succeeded", None)
        assert completion == "succeeded"
        assert row is not None and row.state == "succeeded" and row.finished_at is not None
        with store.write() as writes:
            other = create_run(writes)
            assert writes.runs.move(other, run_edge("start"), actor=ACTOR) is not None
            cancelled = create_task(writes, other, TaskRunState.READY)
            assert writes.tasks.move(cancelled, edge("cancel_ready"), actor="test") is not None
            assert writes.runs.succeed_when_complete(other, actor=ACTOR) == ("cancelled", None)

    def test_a_closing_completion_marks_the_run_only_when_it_is_left_unsettled(
        self, store: Store
    ) -> None:
        # As a worker's finish does: no edge marks by itself, only the completion's own
        # statement does.
        with store.write(marks_runs=False) as writes:
            run_id, done_id = create_run(writes), create_run(writes)
            task_id = create_task(writes, run_id, TaskRunState.READY, "a")
            done_task = create_task(writes, done_id, TaskRunState.READY, "b")
            for run in (run_id, done_id):
                assert writes.runs.move(run, run_edge("start"), actor=ACTOR) is not None
        # Unfinished: the task that is not finished yet will mark the run.
        with store.write(marks_runs=False) as writes:
            closed = writes.runs.succeed_when_complete(run_id, actor=ACTOR, finished_task_key="a")
            assert closed == ("unfinished", None) and not writes.marks.made
        with store.write(marks_runs=False) as writes:
            assert writes.tasks.move(task_id, edge("cancel_ready"), actor=ACTOR) is not None
        # Complete but not succeeded (a task cancelled): left for a scheduler, marked.
        with store.write(marks_runs=False) as writes:
            closed = writes.runs.succeed_when_complete(run_id, actor=ACTOR, finished_task_key="a")
            assert closed == ("cancelled", None) and writes.marks.made
        # Succeeded: settled, nothing to mark.
        with store.write(marks_runs=False) as writes:
            claimed = writes.tasks.claim(done_task, "w1", LEASE_S)
            assert claimed is not None
            writes.tasks.finish(done_task, edge("succeed"), claimed.fencing_token, actor=ACTOR)
            completion, row = writes.runs.succeed_when_complete(
                done_id, actor=ACTOR, finished_task_key="b"
            )
            assert completion == "succeeded" and row is not None and not writes.marks.made
        with store.write(marks_runs=False) as writes:
            assert writes.marks.clear(run_id) == ["a"]
            assert writes.marks.clear(done_id) == []

    def test_finish_and_move_refuse_an_edge_that_is_not_theirs(
        self, store: Store, run_and_task: tuple[UUID, UUID]
    ) -> None:
        _, task_id = run_and_task
        with store.write() as writes:
            with pytest.raises(ValueError, match="finish takes"):
                writes.tasks.finish(task_id, edge("claim"), 0, actor="test")
            with pytest.raises(ValueError, match="move takes"):
                writes.tasks.move(task_id, edge("succeed"), actor="test")

    def test_renew_lease_extends_only_with_the_current_token(
        self, store: Store, run_and_task: tuple[UUID, UUID]
    ) -> None:
        _, task_id = run_and_task
        with store.write() as writes:
            claimed = writes.tasks.claim(task_id, "w1", TINY_S)
            assert claimed is not None
            assert (
                writes.tasks.renew_lease(task_id, claimed.fencing_token + 1, LEASE_S, actor="test")
                is None
            )
            renewed = writes.tasks.renew_lease(
                task_id, claimed.fencing_token, LEASE_S, actor="test"
            )
        assert renewed is not None and renewed.version == claimed.version + 1
        assert renewed.lease_expires_at is not None and claimed.lease_expires_at is not None
        assert renewed.lease_expires_at > claimed.lease_expires_at

    def test_reclaim_waits_for_the_database_clock_to_pass_the_lease(
        self, store: Store, run_and_task: tuple[UUID, UUID]
    ) -> None:
        _, task_id = run_and_task
        with store.write() as writes:
            claimed = writes.tasks.claim(task_id, "w1", TINY_S)
            assert claimed is not None and claimed.lease_expires_at is not None
            assert (
                writes.tasks.reclaim(task_id, actor="test") is None
            )  # the lease has not expired yet
        wait_for_clock(store, claimed.lease_expires_at)
        with store.read() as reads:
            assert reads.expired_leases(10) == [task_id]
        with store.write() as writes:
            reclaimed = writes.tasks.reclaim(task_id, actor="test")
        assert reclaimed is not None and reclaimed.state == "ready"
        assert reclaimed.fencing_token == claimed.fencing_token + 1
        assert reclaimed.lease_owner is None and reclaimed.lease_expires_at is None

    def test_schedule_retry_then_retry_ready_once_due(
        self, store: Store, run_and_task: tuple[UUID, UUID]
    ) -> None:
        _, task_id = run_and_task
        with store.write() as writes:
            claimed = writes.tasks.claim(task_id, "w1", LEASE_S)
            assert claimed is not None
            failed = writes.tasks.finish(
                task_id, edge("fail"), claimed.fencing_token, error={"type": "E"}, actor="test"
            )
            assert failed is not None and failed.error == {"type": "E"}
            retrying = writes.tasks.schedule_retry(task_id, TINY_S, actor="test")
            assert retrying is not None and retrying.retry_due_at is not None
            assert writes.tasks.retry_ready(task_id, actor="test") is None  # not due yet
        assert (retrying.state, retrying.attempt, retrying.finished_at) == ("retrying", 2, None)
        wait_for_clock(store, retrying.retry_due_at)
        with store.write() as writes:
            ready = writes.tasks.retry_ready(task_id, actor="test")
        assert ready is not None and ready.state == "ready" and ready.retry_due_at is None

    def test_move_task_takes_its_edge_only_from_its_source(self, store: Store) -> None:
        with store.write() as writes:
            run_id = create_run(writes)
            task_id = create_task(writes, run_id, TaskRunState.PENDING)
            assert writes.tasks.move(task_id, edge("cancel_ready"), actor="test") is None
            promoted = writes.tasks.move(task_id, edge("dependencies_satisfied"), actor="test")
            cancelled = writes.tasks.move(task_id, edge("cancel_ready"), actor="test")
        assert promoted is not None and promoted.state == "ready"
        assert cancelled is not None and cancelled.state == "cancelled"
        assert cancelled.finished_at is not None

    # --- workflow runs -----------------------------------------------------------------

    def test_move_run_sets_started_and_finished_and_lock_run_reads_the_row(
        self, store: Store, run_and_task: tuple[UUID, UUID]
    ) -> None:
        run_id, _ = run_and_task
        with store.write() as writes:
            locked = writes.runs.lock(run_id)
            assert writes.runs.lock(uuid4()) is None
            assert (
                writes.runs.move(run_id, run_edge("succeed"), actor=ACTOR) is None
            )  # not running
            started = writes.runs.move(run_id, run_edge("start"), actor=ACTOR)
            finished = writes.runs.move(run_id, run_edge("succeed"), actor=ACTOR)
        assert locked is not None and locked.run_state is WorkflowRunState.PENDING
        assert started is not None and started.started_at is not None
        assert started.finished_at is None
        assert finished is not None and finished.state == "succeeded"
        assert finished.finished_at is not None and finished.version == 3

    # --- the outbox ----------------------------------------------------------------------

    def test_dispatches_are_pending_until_marked_published(
        self, store: Store, run_and_task: tuple[UUID, UUID]
    ) -> None:
        _, task_id = run_and_task
        with store.write() as writes:
            dispatch_id = writes.outbox.enqueue(task_id, "a", "t", 0, at=writes.now())
            other = writes.outbox.enqueue(task_id, "a", "t", 0, at=writes.now())
            left = writes.outbox.enqueue(task_id, "a", "t", 0, at=writes.now())
        with store.read() as reads:
            assert reads.pending_dispatch_count() == 3
            row = next(r for r in reads.dispatches_of(task_id) if r.dispatch_id == dispatch_id)
        assert (row.dispatch_id, row.task_run_id, row.published_at) == (dispatch_id, task_id, None)
        with store.write() as writes:
            assert {r.dispatch_id for r in writes.outbox.pending(10)} == {
                dispatch_id,
                other,
                left,
            }
            writes.outbox.mark_published([dispatch_id, other])
            writes.outbox.mark_published([])  # nothing to mark: nothing sent
            assert [r.dispatch_id for r in writes.outbox.pending(10)] == [left]
        with store.read() as reads:
            assert reads.pending_dispatch_count() == 1
            published = {r.dispatch_id: r.published_at for r in reads.dispatches_of(task_id)}
        assert published[dispatch_id] is not None and published[other] is not None
        assert published[left] is None

    def test_stalled_ready_finds_a_ready_task_with_no_dispatch(
        self, store: Store, run_and_task: tuple[UUID, UUID]
    ) -> None:
        _, task_id = run_and_task
        with store.write() as writes:
            assert [t.id for t in writes.outbox.stalled_ready(0.0, 10)] == [task_id]
            assert writes.outbox.stalled_ready(3600.0, 10) == []
            writes.outbox.enqueue(task_id, "a", "t", 0, at=writes.now())
            assert writes.outbox.stalled_ready(0.0, 10) == []  # a dispatch is pending

    # --- the rebuild ---------------------------------------------------------------------

    def test_deleting_and_applying_the_log_gives_the_same_rows(
        self, store: Store, run_and_task: tuple[UUID, UUID]
    ) -> None:
        run_id, task_id = run_and_task
        app_events = _mapper_events(store)
        with store.write() as writes:
            assert writes.tasks.claim(task_id, "w1", LEASE_S) is not None  # and its event
        with store.read() as reads:
            before = (reads.workflow_run(run_id), reads.task_run(task_id))
        with store.write(rebuild=True) as writes:
            stored = writes.rebuild.stored_events()
            writes.rebuild.delete_projections()
            assert writes.task_run(task_id) is None
            for record in stored:
                writes.rebuild.apply(app_events(record))
        with store.read() as reads:
            assert (reads.workflow_run(run_id), reads.task_run(task_id)) == before


def _claimed_event(row: TaskRunRow) -> task_run.TaskRun.Transitioned:
    return task_run.event_from_row(
        task_run.TaskRun.Claimed, row.values(), source="ready", actor=ACTOR
    )


def _mapper_events(store: Store) -> Any:
    return store._mapper.to_domain_event


class TestPostgresStore(StoreContract):
    @pytest.fixture
    def store(self, pg_app: FlowForge) -> Store:
        return pg_app.store

    def test_nothing_is_written_after_a_statement_that_committed(
        self, store: Store, run_and_task: tuple[UUID, UUID]
    ) -> None:
        # PostgreSQL only: SQLite commits at the end of the transaction, not with a
        # statement, so there the same code writes the mark in the same transaction.
        run_id, task_id = run_and_task

        def claim_then_mark() -> None:
            with store.write() as writes:
                assert writes.tasks.claim(task_id, "w1", LEASE_S, last=True) is not None
                writes.marks.mark(run_id)

        with pytest.raises(TypeError, match="which committed it"):
            claim_then_mark()
        with store.read() as reads:
            task = reads.task_run(task_id)
        assert task is not None and task.state == "running"  # the claim committed


class TestPostgresStoreInline(StoreContract):
    """The same contract with prepared statements off (behind a transaction-pooling PgBouncer):
    each statement goes as an unnamed one, parsed each time."""

    @pytest.fixture
    def store(self, postgres_url: str) -> Iterator[Store]:
        empty_postgres(postgres_url)
        with FlowForge(postgres_url, prepared_statements=False) as app:
            yield app.store


class TestSqliteStore(StoreContract):
    @pytest.fixture
    def store(self, sqlite_app: FlowForge) -> Store:
        return sqlite_app.store
