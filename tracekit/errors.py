"""The one exception type tracekit raises for bad input (and its subclass for its own bugs)."""

from __future__ import annotations

from pathlib import Path


class TracekitError(Exception):
    """A problem with the user's input, said in one line that names the file.

    The CLI prints ``str(error)`` and exits non-zero; it never shows a traceback for these.
    """

    def __init__(self, problem: str, path: str | Path | None = None) -> None:
        self.problem = problem
        self.path = Path(path) if path is not None else None
        super().__init__(f"{self.path}: {problem}" if self.path is not None else problem)


class InternalError(TracekitError):
    """A bug in tracekit met while reading one input: reported as one line, with the
    traceback kept for ``--debug``; the CLI exits with its own status."""

    def __init__(self, problem: str, path: str | Path | None = None, traceback: str = "") -> None:
        super().__init__(f"internal error: {problem}", path)
        self.traceback = traceback
