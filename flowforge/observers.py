"""A process installs its observers here, at start (docs/observability.md,
"Observers"): the one call the command line makes, with what it was asked for."""

from __future__ import annotations

from collections.abc import Callable

from flowforge import metrics, observe, tracing


def install(
    *,
    traces_for: str | None = None,
    metrics_port: int | None = None,
    backlog: Callable[[], metrics.Backlog] | None = None,
) -> None:
    """Install what this process was asked for; nothing asked, nothing installed.

    ``traces_for``: the service name its spans carry; traces are recorded if the
    environment asks for them (``tracing.configure``) or a tracer provider was set
    before FlowForge started. ``metrics_port``: count, and serve the counts there
    (``OSError`` if the port is taken), with the database's figures read by
    ``backlog`` at each scrape if given (one process's job, the scheduler's).
    """
    if traces_for is not None and (tracing.configure(traces_for) or tracing.provider_set()):
        observe.install(tracing.TRACES)
    if metrics_port is not None:
        metrics.serve(metrics_port)
        if backlog is not None:
            metrics.collect_database(backlog)
