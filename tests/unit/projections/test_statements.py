"""SQL as data: the shared files (common.sql and one per concept) rendered per dialect, each
statement once (pure: no database)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from flowforge.aggregates import task_run, workflow_run
from flowforge.projections import schema, statements

DIALECTS = statements.DIALECTS
#: A macro left unrendered, or a placeholder of the other dialect.
UNRENDERED = re.compile(r"\{\w+(\[\w+\])?\}")


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_macro_is_rendered(dialect: str) -> None:
    leftovers = {
        name: UNRENDERED.findall(sql)
        for name, sql in statements.load(dialect).items()
        if UNRENDERED.search(sql)
    }
    assert leftovers == {}


def test_both_dialects_have_the_same_statements_and_postgres_records_each_transition() -> None:
    recorded = {statements.recorded_name(name) for name in statements.RECORDED_STATEMENTS}
    only = statements.POSTGRES_ONLY_STATEMENTS
    assert set(statements.load("postgres")) == set(statements.load("sqlite")) | recorded | only
    assert not (recorded | only) & set(statements.load("sqlite"))


@pytest.mark.parametrize("name", sorted(statements.RECORDED_STATEMENTS))
def test_a_recorded_transition_is_its_update_plus_the_insert_of_its_event(name: str) -> None:
    postgres = statements.load("postgres")
    recorded = postgres[statements.recorded_name(name)]
    assert postgres[name].rstrip(";") in recorded
    assert "INSERT INTO flowforge_events" in recorded
    # Every field an event carries, from its aggregate's declaration.
    mutable = statements.RECORDED_STATEMENTS[name].mutable
    assert mutable == (task_run if name.startswith("task_") else workflow_run).MUTABLE_FIELDS
    for field in ("timestamp", "source", "actor", *mutable):
        assert f"'{field}', " in recorded


def test_postgres_parameters_are_psycopg_style_and_sqlite_keeps_colon_names() -> None:
    postgres, sqlite = statements.load("postgres"), statements.load("sqlite")
    claim = "task_claim"
    assert "%(worker_id)s" in postgres[claim] and ":worker_id" not in postgres[claim]
    assert ":worker_id" in sqlite[claim] and "%(" not in sqlite[claim]
    assert "interval '1 second'" in postgres[claim]
    assert "CAST(coalesce(:lease_seconds, lease_seconds) * 1000000 AS integer)" in sqlite[claim]


def test_only_postgres_keeps_updated_at_from_going_backwards() -> None:
    postgres, sqlite = statements.load("postgres"), statements.load("sqlite")
    assert "updated_at = greatest(now(), updated_at)" in postgres["task_finish"]
    assert "greatest" not in sqlite["task_finish"]
    assert "julianday('now')" in sqlite["task_finish"]


def test_the_column_lists_come_from_the_aggregates_declarations() -> None:
    sqlite = statements.load("sqlite")
    for field in task_run.MUTABLE_FIELDS:
        assert f"{field} = :{field}" in sqlite["apply_task_run_event"]
    for field in workflow_run.MUTABLE_FIELDS:
        assert f"{field} = :{field}" in sqlite["apply_workflow_run_event"]
    for field in task_run.STATIC_FIELDS:
        assert f":{field}" in sqlite["insert_task_run"]


def test_every_migration_has_a_statement_in_both_dialects() -> None:
    for dialect in DIALECTS:
        assert [m for m in schema.MIGRATIONS if m not in statements.load(dialect)] == []


def test_an_unknown_dialect_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="'mysql'"):
        statements.load("mysql")


def test_a_statement_defined_twice_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    real = statements._read

    def with_a_second_db_now(file: str) -> str:
        extra = "\n-- name: db_now\nSELECT 2;\n" if file == "sqlite.sql" else ""
        return real(file) + extra

    monkeypatch.setattr(statements, "_read", with_a_second_db_now)
    statements.load.cache_clear()
    try:
        with pytest.raises(ValueError, match="'db_now' is defined twice"):
            statements.load("sqlite")
    finally:
        monkeypatch.undo()
        statements.load.cache_clear()


def test_migration_files_are_numbered_from_one_without_gaps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert statements.migration_names()[0] == "migration_001"
    monkeypatch.setattr(statements, "migration_files", lambda: ["001_initial.sql", "003_x.sql"])
    statements.migration_names.cache_clear()
    try:
        with pytest.raises(ValueError, match=r"003_x.sql: expected 002_<what>.sql"):
            statements.migration_names()
    finally:
        monkeypatch.undo()
        statements.migration_names.cache_clear()


def test_the_schema_file_and_the_first_migration_render_for_both_dialects() -> None:
    for dialect in DIALECTS:
        loaded = statements.load(dialect)
        assert "CREATE TABLE task_runs" in loaded["schema"]
        assert "CREATE TABLE task_runs" in loaded["migration_001"]


def test_the_seconds_macro_names_its_parameter() -> None:
    seconds = statements._Parameterized("CAST(:param * 1000000 AS integer)")
    assert seconds["delay_seconds"] == "CAST(:delay_seconds * 1000000 AS integer)"


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_list_macros_name_their_parameter_in_every_statement(dialect: str) -> None:
    claim_read = statements.load(dialect)["select_runs_of_tasks_unless_known"]
    parameter = "%(task_run_ids)s" if dialect == "postgres" else ":task_run_ids"
    assert parameter in claim_read
    assert ":param" not in "".join(statements.load(dialect).values())


def test_multi_statement_blocks_split_on_semicolons() -> None:
    assert statements.statements("CREATE A;\n CREATE B ;\n") == ["CREATE A", "CREATE B"]


def test_no_module_outside_the_store_names_a_sql_statement() -> None:
    package = Path(statements.__file__).parent.parent
    names = set(statements.load("sqlite"))
    leaks = []
    for path in package.rglob("*.py"):
        if path.is_relative_to(package / "projections"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in names:
                leaks.append(f"{path.relative_to(package)}: {node.value!r}")
    assert leaks == []


def _names_in(file: str) -> set[str]:
    text = (Path(statements.__file__).parent / "sql" / file).read_text()
    return set(re.findall(r"^-- name: (\w+)\s*$", text, re.MULTILINE))


def test_each_concept_has_its_own_sql_file() -> None:
    # One file per concept (as procrastinate keeps one per manager): the limits'
    # statements are in limits.sql, none of them left in common.sql.
    limits = _names_in("limits.sql")
    assert {"take_run_slot", "task_claim_limited", "change_task_type_limit"} <= limits
    assert not limits & _names_in("common.sql")
    assert "insert_schedule" in _names_in("schedules.sql")
    assert {"insert_outbox", "select_pending_outbox"} <= _names_in("outbox.sql")
    assert {"mark_run_wakeup", "select_woken_runs"} <= _names_in("wakeups.sql")
    loaded = set(statements.load("sqlite"))
    for file in statements.SHARED_FILES:
        assert _names_in(file) <= loaded, file
