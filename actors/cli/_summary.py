"""``--summary PATH``: how a run ended, as JSON, for the demo and the coordinator CLI."""

from __future__ import annotations

import json
import pathlib
from typing import Any


def summary_path_problem(path: str | None) -> str | None:
    """Why ``path`` cannot take the summary (checked before the run starts), or None."""
    if path is None:
        return None
    target = pathlib.Path(path)
    if target.is_dir():
        return f"--summary {path}: a directory; name a file"
    if not target.parent.is_dir():
        return f"--summary {path}: no directory {target.parent}"
    return None


def write_summary(path: str, summary: dict[str, Any]) -> None:
    """Write ``summary`` whole (through a temp file and a rename: a reader never sees half of it)."""
    target = pathlib.Path(path)
    part = target.with_name(target.name + ".part")
    part.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    part.replace(target)
