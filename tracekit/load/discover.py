"""Turn the paths a user gives into groups of trace files (one group per run or variant).

Files of a group (a directory's, or the files given) are in natural name order: names
compared piece by piece, runs of digits as numbers (``worker2`` before ``worker10``), ties
broken by the plain name. The order is stable, and it is the order in which traces without a
recorded rank are numbered 0, 1, ...
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tracekit.contract import RECORD_FILES
from tracekit.contract import VARIANTS as VARIANT_ORDER
from tracekit.errors import TracekitError

CHROME_SUFFIXES = (".json", ".json.gz")
NSYS_SUFFIXES = (".sqlite", ".nsys-rep")


@dataclass(frozen=True)
class Group:
    """Trace files analysed together: the ranks of one run or one variant."""

    name: str
    files: tuple[Path, ...]


def is_chrome(path: Path) -> bool:
    return path.name.endswith(CHROME_SUFFIXES) and path.name not in RECORD_FILES


def is_nsys(path: Path) -> bool:
    return path.name.endswith(NSYS_SUFFIXES)


_DIGITS = re.compile(r"(\d+)")


def natural_key(path: Path) -> tuple[tuple[tuple[int, int | str], ...], str]:
    """Sort key of a file name: digit runs compare as numbers, then the plain name."""
    parts = _DIGITS.split(path.name)
    return tuple((1, int(p)) if p.isdigit() else (0, p) for p in parts), path.name


def _traces_in(directory: Path) -> list[Path]:
    """Trace files directly inside ``directory`` in natural name order: Chrome traces when there
    are any, else Nsight Systems files (an SQLite export stands in for the report it came from).
    """
    try:
        entries = list(directory.iterdir())
    except OSError as e:
        raise TracekitError(f"unreadable directory ({e.strerror or e})", directory) from None
    files = sorted((p for p in entries if p.is_file()), key=natural_key)
    chrome = [p for p in files if is_chrome(p)]
    if chrome:
        return chrome
    exports = {p for p in files if p.suffix == ".sqlite"}
    reports = [p for p in files if is_nsys(p) and p.with_suffix(".sqlite") not in exports]
    return sorted(exports, key=natural_key) + reports


def _traces_in_or_itself(directory: Path) -> list[Path]:
    """A sub-directory's traces; an unreadable one stands for itself, so that loading it
    reports the problem for that group only (``load_file`` on a directory)."""
    try:
        return _traces_in(directory)
    except TracekitError:
        return [directory]


def _variant_key(directory: Path) -> tuple[int, str]:
    """Known variants in their usual order, then the rest by name."""
    name = directory.name
    return (VARIANT_ORDER.index(name) if name in VARIANT_ORDER else len(VARIANT_ORDER), name)


def _add(groups: dict[str, list[Path]], name: str, files: list[Path]) -> None:
    """Add a directory's traces: Chrome traces form one group (one file per rank); each
    Nsight Systems file holds a whole run and is a group of its own when there are several."""
    nsys = [f for f in files if is_nsys(f)]
    if len(nsys) > 1:
        for f in nsys:
            groups.setdefault(f"{name}/{f.name}", []).append(f)
        files = [f for f in files if not is_nsys(f)]
    if files:
        groups.setdefault(name, []).extend(files)


def discover(paths: Iterable[str | Path]) -> list[Group]:
    """Files stay with their directory's group; a directory of traces is one group; a run
    directory (sub-directories of traces) gives one group per sub-directory."""
    groups: dict[str, list[Path]] = {}
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            if not (is_chrome(path) or is_nsys(path)):
                raise TracekitError(
                    "not a trace file (expected .json, .json.gz, .sqlite or .nsys-rep)", path
                )
            groups.setdefault(path.parent.name or ".", []).append(path)
        elif path.is_dir():
            direct = _traces_in(path)
            if direct:
                _add(groups, path.name, direct)
                continue
            subdirs = sorted((d for d in path.iterdir() if d.is_dir()), key=_variant_key)
            found = [(d, _traces_in_or_itself(d)) for d in subdirs]
            found = [(d, f) for d, f in found if f]
            if not found:
                raise TracekitError(
                    "no trace files (*.json, *.json.gz, *.sqlite, *.nsys-rep) here "
                    "or in its sub-directories",
                    path,
                )
            for d, files in found:
                _add(groups, d.name, files)
        else:
            raise TracekitError("no such file or directory", path)
    return [
        Group(name, tuple(sorted(dict.fromkeys(files), key=natural_key)))
        for name, files in groups.items()
    ]
