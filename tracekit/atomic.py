"""Atomic file writes: a temporary file beside the target, then ``os.replace``, so readers
never see half a file and a failed write leaves the old one as it was."""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tracekit.errors import TracekitError


def write_bytes(path: Path, data: bytes) -> int:
    """Write ``data`` to ``path`` atomically; return the bytes written. Raise TracekitError
    naming the file when it cannot be written."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise TracekitError(f"cannot write here ({e.strerror})", path) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise TracekitError(f"cannot write ({e.strerror})", path) from None
    return len(data)


def write_text(path: Path, text: str) -> int:
    """``write_bytes`` of ``text`` in UTF-8."""
    return write_bytes(path, text.encode("utf-8"))


@contextmanager
def replacing(path: Path, suffix: str = "", *, keep_existing: bool = False) -> Iterator[Path]:
    """For writers that only take a file name (torch's trace export, ``nsys export``): yield a
    fresh path beside ``path``, not yet created and ending in ``suffix``. When the block ends
    normally the file written there replaces ``path`` atomically (with ``keep_existing``, a
    ``path`` that appeared meanwhile is kept and the new file dropped); when it raises, it is
    removed and ``path`` stays as it was. Raise TracekitError naming the file when it cannot be
    moved in, or was never written."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp{suffix}")
    try:
        yield tmp
        if not tmp.is_file():
            raise TracekitError("was not written", path)
        if keep_existing and path.exists():
            return
        try:
            os.replace(tmp, path)
        except OSError as e:
            raise TracekitError(f"cannot write ({e.strerror})", path) from None
    finally:
        tmp.unlink(missing_ok=True)
