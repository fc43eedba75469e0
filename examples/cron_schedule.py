"""Cron schedules from Python: add one, fire it as a scheduler would, pause, resume, delete.

Runs on a fresh SQLite file. ``fire_due_schedules(as_of=...)`` fires what is due as if
the clock said ``as_of`` (a scheduler passes nothing: the database's clock), so the
example shows a fire without waiting for 02:30 in Paris.
"""

import tempfile
from datetime import timedelta
from zoneinfo import ZoneInfo

from flowforge import FlowForge

workflow = {"name": "nightly_report", "tasks": [{"key": "build", "type": "report"}]}
paris = ZoneInfo("Europe/Paris")

with tempfile.TemporaryDirectory() as scratch, FlowForge(f"sqlite:///{scratch}/c.db") as app:
    added = app.add_schedule(
        "nightly", "30 2 * * *", workflow, {"day": "yesterday"}, timezone="Europe/Paris"
    )
    print("added:", added.name, added.state, added.cron, added.timezone)
    assert added.next_fire_at is not None  # an active schedule has one

    # A scheduler down for two days and three hours comes back: by default it runs the
    # latest missed fire time once (catch_up=0), and the schedule moves on from now.
    back = added.next_fire_at + timedelta(days=2, hours=3)
    (fired,) = app.fire_due_schedules(as_of=back)
    print("fired: 1 run, for", fired.fire_at.astimezone(paris).strftime("%H:%M"), "in Paris")
    run = app.get_workflow_run(fired.run_id)
    print("its run:", run.workflow_name, run.inputs)
    print("fired again at the same moment:", app.fire_due_schedules(as_of=back))

    print("paused:", app.pause_schedule("nightly"), app.get_schedule("nightly").state)
    print("resumed:", app.resume_schedule("nightly"), app.get_schedule("nightly").state)
    print("deleted:", app.delete_schedule("nightly"), app.list_schedules())
