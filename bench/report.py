"""How a benchmark hands over its result: printed for a reader, appended for a record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def emit(result: dict[str, Any], out: Path | None) -> None:
    """Print ``result`` as indented JSON and, given ``out``, append it there as one line
    (a file of many runs, one JSON object per line)."""
    print(json.dumps(result, indent=2))
    if out:
        with out.open("a") as lines:
            lines.write(json.dumps(result) + "\n")
