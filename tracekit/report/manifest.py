"""A run's records, read for the report: the run directory's manifest and the variants' timing
records. Both are optional; an unreadable one becomes a note, never an error."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.contract import MANIFEST, TIMING_JSON


@dataclass(frozen=True)
class Records:
    """What the report shows about how the run was made."""

    manifest: dict[str, Any] | None  # the run directory's manifest.json
    manifest_path: Path | None
    timings: dict[str, dict[str, Any]]  # variant directory name -> its timing.json
    notes: tuple[str, ...]  # records that could not be read


MAX_DEPTH = 8  # levels of a record shown; deeper parts are summarised


def _read(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        return None, f"{path}: nested too deeply to read; not shown"
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return None, f"{path}: unreadable ({type(e).__name__}); not shown"
    if not isinstance(doc, dict):
        return None, f"{path}: not a JSON object; not shown"
    return shallow(doc), None


def shallow(value: Any, depth: int = MAX_DEPTH) -> Any:
    """``value`` with everything deeper than ``depth`` levels replaced by a short text, so
    that showing it never recurses far. Recursion here stops at ``depth``."""
    if isinstance(value, dict | list):
        if depth <= 0:
            return f"… ({type(value).__name__} nested deeper than {MAX_DEPTH} levels; see the file)"
        if isinstance(value, dict):
            return {str(k): shallow(v, depth - 1) for k, v in value.items()}
        return [shallow(v, depth - 1) for v in value]
    return value


def read_records(paths: Iterable[str | Path]) -> Records:
    """The manifest of the first run directory among ``paths`` (or of the directory holding a
    given variant directory), and each variant directory's timing.json."""
    manifest: dict[str, Any] | None = None
    manifest_path: Path | None = None
    timings: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    for raw in paths:
        path = Path(raw)
        if not path.is_dir():
            continue
        variant_dirs = [path, *sorted(d for d in path.iterdir() if d.is_dir())]
        for candidate in (path / MANIFEST, path.parent / MANIFEST):
            if manifest is None and candidate.is_file():
                manifest, note = _read(candidate)
                manifest_path = candidate if manifest is not None else None
                notes.extend([note] if note else [])
        for d in variant_dirs:
            timing = d / TIMING_JSON
            if timing.is_file() and d.name not in timings:
                doc, note = _read(timing)
                if doc is not None:
                    timings[d.name] = doc
                notes.extend([note] if note else [])
    return Records(manifest, manifest_path, timings, tuple(notes))
