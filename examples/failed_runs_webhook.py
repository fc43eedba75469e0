"""Post every failed run to a webhook, as it fails (docs/feed.md, "A consumer that acts").

    python -m examples.failed_runs_webhook https://hooks.example/flowforge --state hook.pos

It follows FlowForge's feed and POSTs one JSON object per run that failed:
``{"run_id", "failed_at", "actor", "position"}``. Delivery is at least once, made
idempotent by a key: the feed position is saved (``--state``) only after the webhook
answered 2xx, so a crash between the POST and the save posts that run again on restart,
with the same ``Idempotency-Key`` header (the run's id, which fails once) for the
receiver to drop the repeat. A webhook that refuses or is down is tried again, every
``RETRY_S``, for the same run: the follower never moves past a run it has not posted.

FlowForge's database is ``FLOWFORGE_DATABASE_URL`` (or ``--database-url``).
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import urllib.error
import urllib.request
from pathlib import Path

from flowforge import FlowForge
from flowforge.app.feed import FeedEvent

#: How long to wait before posting a run again after the webhook failed.
RETRY_S = 1.0
#: How long one POST may take.
POST_TIMEOUT_S = 10.0


def is_failed_run(event: FeedEvent) -> bool:
    """A run's own transition into ``failed`` (a task's failure may yet be retried)."""
    return event.aggregate == "WorkflowRun" and event.target == "failed"


def payload(event: FeedEvent) -> dict[str, str]:
    return {
        "run_id": str(event.run_id),
        "failed_at": event.at.isoformat(),
        "actor": event.actor,
        "position": event.position,
    }


def post(url: str, event: FeedEvent) -> None:
    """POST the run; raises ``OSError`` (``urllib.error.URLError``) unless answered 2xx."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"the webhook must be an http(s) URL, got {url!r}")
    request = urllib.request.Request(  # noqa: S310 (http or https: checked above)
        url,
        data=json.dumps(payload(event)).encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": str(event.run_id)},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=POST_TIMEOUT_S) as response:  # noqa: S310
        if not 200 <= response.status < 300:
            raise urllib.error.URLError(f"webhook answered {response.status}")


def load_position(state: Path) -> str | None:
    return state.read_text().strip() or None if state.exists() else None


def save_position(state: Path, position: str) -> None:
    """Atomically: a crash leaves the old position or the new one, never half of one."""
    scratch = state.with_suffix(state.suffix + ".tmp")
    scratch.write_text(position)
    scratch.replace(state)


def consume(
    app: FlowForge, url: str, state: Path, stop: threading.Event, poll_s: float = 1.0
) -> int:
    """Follow the feed from the saved position until ``stop``; the runs posted."""
    posted = 0
    for event in app.follow(after=load_position(state), stop=stop, poll_s=poll_s):
        if is_failed_run(event):
            while True:
                try:
                    post(url, event)
                    posted += 1
                    break
                except OSError:
                    if stop.wait(RETRY_S):
                        return posted  # stopped before it was posted: not saved either
        save_position(state, event.position)
    return posted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="the webhook to POST each failed run to")
    parser.add_argument("--state", required=True, type=Path, help="where the position is kept")
    parser.add_argument("--database-url", default=os.environ.get("FLOWFORGE_DATABASE_URL"))
    args = parser.parse_args()
    stop = threading.Event()
    with FlowForge(args.database_url) as app:
        try:
            consume(app, args.url, args.state, stop)
        except KeyboardInterrupt:
            stop.set()


if __name__ == "__main__":
    main()
