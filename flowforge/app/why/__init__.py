"""Why a task run is where it is: the question ``flowforge why`` answers.

Two steps: :mod:`~flowforge.app.why.facts` gathers the facts, now or as of a past moment
from the log; :mod:`~flowforge.app.why.explain` turns them into a headline and details.
"""

from flowforge.app.why.explain import explain, why
from flowforge.app.why.facts import (
    Dispatch,
    Explanation,
    RunView,
    Situation,
    TaskView,
    situation_as_of,
    situation_now,
)
from flowforge.app.why.mapped_then import mapped_tasks_as_of

__all__ = [
    "Dispatch",
    "Explanation",
    "RunView",
    "Situation",
    "TaskView",
    "explain",
    "mapped_tasks_as_of",
    "situation_as_of",
    "situation_now",
    "why",
]
