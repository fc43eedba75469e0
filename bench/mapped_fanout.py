"""Cost per element of a mapped task (``map_over``) against a static fan-out.

    python -m bench.mapped_fanout                     # --width 10000 --reps 3
    python -m bench.mapped_fanout --sqlite            # the same on a SQLite file

Two runs of the same width, each on a fresh database (``bench.fanout_scale``'s):

* **static**: a root task and ``--width`` tasks that depend on it, created with the
  run (``bench.fanout_scale.fanout``); the root's finish promotes them all.
* **mapped**: a root task whose result is a list of ``--width`` numbers and one task
  ``map_over`` it; the root's finish creates the ``--width`` elements, ready, in its
  own transaction.

Both report the wall time from the root's finish call until every dependant (or
element) is seen ready with its dispatch in the outbox (``all_ready_after_upstream_s``)
and the finish call's own; the mapped run also reports the ratio to the static one
(issue 46's target: at most 1.5). Nothing asserts a time; the checks are that every
element was created once, ready, with one dispatch.

``--sqlite``: both on a fresh SQLite file instead. There the finish call does it all (the
elements created, or the dependants promoted, in its transaction): the time until every
one is ready is the finish call's.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import fanout_scale
from bench.end_to_end import drop_database
from bench.report import emit
from flowforge import FlowForge

DEFINITION_NAME = "bench_mapped_fanout"


def mapped(width: int) -> dict[str, Any]:
    app, probe = fanout_scale._fresh()
    try:
        tasks: list[dict[str, Any]] = [
            {"key": "root", "type": "noop"},
            {"key": "each", "type": "noop", "map_over": "root"},
        ]
        run_id = app.start_workflow_run({"name": DEFINITION_NAME, "tasks": tasks})
        result = fanout_scale.finish_root(app, probe, run_id, width, list(range(width)))
        return {"width": width, **result}
    finally:
        app.close()
        probe.close()
        drop_database(fanout_scale.DATABASE)


def on_sqlite(width: int, *, mapped: bool) -> dict[str, Any]:
    """The static (``mapped=False``) or mapped fan-out of ``width`` on a SQLite file."""
    tasks: list[dict[str, Any]] = [{"key": "root", "type": "noop"}]
    if mapped:
        tasks.append({"key": "each", "type": "noop", "map_over": "root"})
    else:
        tasks += [{"key": f"t{i}", "type": "noop", "depends_on": ["root"]} for i in range(width)]
    with tempfile.TemporaryDirectory() as folder, FlowForge(f"sqlite:///{folder}/b.db") as app:
        run_id = app.start_workflow_run({"name": DEFINITION_NAME, "tasks": tasks})
        root = app.task_run_by_key(run_id, "root")
        assert root is not None
        claimed, run = app.claim_task_run_and_its_run(root.id, "bench")
        assert claimed is not None
        assert run is not None
        app.definitions.of(run)
        result = list(range(width)) if mapped else None
        started = time.perf_counter()
        assert app.finish_task_run(root.id, claimed.fencing_token, "succeed", result)
        seconds = time.perf_counter() - started
        assert app.task_counts(run_id) == {"succeeded": 1, "ready": width}
        assert app.pending_dispatch_count() == width + 1  # and the root's
    return {"width": width, "finish_call_s": seconds, "all_ready_after_upstream_s": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--sqlite", action="store_true", help="on a SQLite file")
    options = parser.parse_args()
    result: dict[str, Any] = {"load_average": os.getloadavg()[0], "width": options.width}
    result["backend"] = "sqlite" if options.sqlite else "postgresql"
    static, expanding = (
        (functools.partial(on_sqlite, mapped=False), functools.partial(on_sqlite, mapped=True))
        if options.sqlite
        else (fanout_scale.fanout, mapped)
    )
    for name, measure in (("static", static), ("mapped", expanding)):
        reps = [measure(options.width) for _ in range(options.reps)]
        for key in ("finish_call_s", "all_ready_after_upstream_s"):
            result[f"{name}_{key}"] = statistics.median(rep[key] for rep in reps)
    result["mapped_over_static"] = (
        result["mapped_all_ready_after_upstream_s"] / result["static_all_ready_after_upstream_s"]
    )
    emit(result, options.out)


if __name__ == "__main__":
    main()
