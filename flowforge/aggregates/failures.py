"""A failure and a result as a person reads them: the error's last frames and a value
cut to fit a line. Pure text: the worker's logs, ``status``, ``history`` and ``why`` all
show a failure the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

#: Frames shown of a traceback: the innermost ones, where the handler raised.
LAST_FRAMES = 3
#: The longest error message or result shown inline; the full text is in --json.
MAX_INLINE = 120

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]*)", line (?P<line>\d+), in (?P<name>.*)$')


def shorten(text: str, limit: int = MAX_INLINE) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: max(limit - 1, 0)] + "…"


def summary(error: Mapping[str, str] | None, limit: int = MAX_INLINE) -> str:
    """``KeyError: 'clean'``: the type and the message's first line, shortened."""
    if not error:
        return ""
    lines = (error.get("message") or "").strip().splitlines()
    kind = error.get("type", "Error")
    return shorten(f"{kind}: {lines[0]}" if lines else kind, limit)


def last_frames(
    error: Mapping[str, str] | None, count: int = LAST_FRAMES, *, source: bool = True
) -> list[str]:
    """The innermost ``count`` frames of the error's traceback, innermost last, each
    ``tasks.py:12 in load: rows = ctx.upstream["clean"]`` (without the source line
    when ``source`` is false)."""
    text = (error or {}).get("traceback") or ""
    show_source = source
    frames: list[str] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        match = _FRAME.match(line)
        if match is None:
            continue
        file = match["file"].rsplit("/", 1)[-1]
        frame = f"{file}:{match['line']} in {match['name']}"
        # The source line, when the file could be read, is indented under its frame.
        code = lines[i + 1] if i + 1 < len(lines) else ""
        if show_source and code.startswith("    ") and code.strip():
            frame += f": {shorten(code, 80)}"
        frames.append(frame)
    return frames[-count:]


def short_value(value: Any, limit: int = MAX_INLINE) -> str:
    """A result as compact JSON on one line, shortened; ``-`` for none."""
    if value is None:
        return "-"
    return shorten(json.dumps(value, ensure_ascii=False, default=str), limit)
