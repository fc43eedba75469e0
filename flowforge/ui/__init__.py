"""``flowforge ui``: server-rendered pages that show what the audit log knows (docs/ui.md).

Reads and the actions (cancel, re-run, submit) go through the application service
``FlowForge``; :mod:`~flowforge.ui.layout` and :mod:`~flowforge.ui.replay` are pure.
"""

from flowforge.ui.web import create_app

__all__ = ["create_app"]
