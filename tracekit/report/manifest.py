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


def _read(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return None, f"{path}: unreadable ({type(e).__name__}); not shown"
    if not isinstance(doc, dict):
        return None, f"{path}: not a JSON object; not shown"
    return doc, None


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
