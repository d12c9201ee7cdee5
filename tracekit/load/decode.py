"""The typed trace decoder: Chrome/Kineto JSON -> the events frame, without per-event dicts.

msgspec decodes ``traceEvents`` straight into small typed structs that hold only the fields
and arguments tracekit reads; every other key is skipped by the decoder. Columns are built from
the structs, so the frame equals the one HTA's parser gives (see ``chrome.read_events``) while
most of the document is never turned into Python objects.

The structs carry the types Kineto writes, so a document that decodes holds no value of an odd
type, and its columns go straight into typed arrays without per-value checks. A document the
typed decode refuses (odd types, ``NaN``) is decoded again without types, and the same columns
are built from plain values and checked one by one. Either way every event that cannot be used
is counted and said in the notes instead of being dropped silently.
"""

from __future__ import annotations

import gc
import json
import math
import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from operator import attrgetter
from pathlib import Path
from typing import Annotated, Any

import msgspec
import numpy as np

from tracekit.errors import TracekitError

# ISA-L's inflate: 0.05-0.09 s instead of zlib's 0.10-0.29 s for the 25 MB of the largest
# shared trace (multi_stream_nccl, best of 7 on a busy 2-core machine).
try:
    from isal import igzip as _gzip
except ImportError:  # pragma: no cover - isal is a dependency; stdlib is the fallback
    import gzip as _gzip  # type: ignore[no-redef]

# HTA drops events longer than this as corrupt (hta.common.constants.MAX_EVENT_DURATION_US).
MAX_EVENT_US = 604_800_000_000  # 7 days
INT64_MAX = np.iinfo(np.int64).max
_MAX_US = INT64_MAX // 1000  # the largest µs value whose ns still fits in int64

# An integer that fits int64 (as int_column keeps it); anything else fails the typed decode.
Int64 = Annotated[int, msgspec.Meta(ge=-INT64_MAX, le=INT64_MAX)]
Id = Int64 | float | str | None  # pid, tid, stream: HTA reads numeric strings too (id_column)


class Args(msgspec.Struct, gc=False):
    """The event arguments tracekit reads (raw Kineto names), everything else skipped."""

    stream: Id = -1
    correlation: Int64 = -1
    external_id: Int64 = msgspec.field(default=-1, name="External id")
    bytes: Int64 = -1
    collective_name: str = msgspec.field(default="", name="Collective name")
    in_msg_nelems: Int64 = msgspec.field(default=0, name="In msg nelems")
    out_msg_nelems: Int64 = msgspec.field(default=0, name="Out msg nelems")
    msg_dtype: str = msgspec.field(default="", name="dtype")
    input_dims: Any = msgspec.field(default="-1", name="Input Dims")
    input_type: Any = msgspec.field(default="-1", name="Input type")
    pg_name: str = msgspec.field(default="", name="Process Group Name")
    pg_desc: str = msgspec.field(default="", name="Process Group Description")
    pg_ranks: Any = msgspec.field(default="[]", name="Process Group Ranks")
    group_size: Int64 = msgspec.field(default=0, name="Group size")


class Event(msgspec.Struct, gc=False):
    """One trace event, the fields tracekit reads."""

    ph: Any = None
    cat: str | None = None
    name: str | None = None
    pid: Id = None
    tid: Id = None
    ts: int | float | None = None
    dur: int | float | None = None
    args: Args | None = None


_EVENTS = msgspec.json.Decoder(list[Event])
_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_NO_ARGS = Args()

# Argument columns: (frame column, Args attribute, kind). Integer columns hold -1 (0 for the
# message sizes) where the trace has no value, as in HTA's parser; strings hold "".
ARG_COLUMNS: tuple[tuple[str, str], ...] = (
    ("stream", "int"),
    ("correlation", "int"),
    ("external_id", "int"),
    ("bytes", "int"),
    ("collective_name", "str"),
    ("in_msg_nelems", "int"),
    ("out_msg_nelems", "int"),
    ("msg_dtype", "str"),
    ("input_dims", "object"),
    ("input_type", "object"),
    ("pg_name", "str"),
    ("pg_desc", "str"),
    ("pg_ranks", "object"),
    ("group_size", "int"),
)
ARG_DEFAULTS: dict[str, Any] = {
    name: getattr(_NO_ARGS, name) for name, _ in ARG_COLUMNS
}  # the HTA defaults


def read_bytes(path: Path) -> bytes:
    """The file's JSON bytes (gunzipped when named .gz); TracekitError when unreadable."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TracekitError(f"unreadable ({e.strerror or e})", path) from None
    if not path.name.endswith(".gz"):
        return data
    try:
        return _gzip.decompress(data)
    except (OSError, EOFError, zlib.error, ValueError) as e:
        raise TracekitError(f"truncated or corrupt gzip ({e})", path) from None


def decode(path: Path) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """Decode a Chrome trace into (metadata, columns, notes).

    ``columns`` maps cat, name, pid, tid, ts, dur and the ARG_COLUMNS to one entry per usable
    event that has a duration and a category (HTA's rule), in file order: final numpy arrays
    (ts and dur in µs) when every value was of the right type, else lists for chrome._frame
    to check.
    """
    data = read_bytes(path)
    with _gc_paused():
        return _decode(data, path)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Hold the cyclic garbage collector off: the objects a decode creates would set off full
    collections, each walking all of them (about 80 ms of a 200k-event trace)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _decode(data: bytes, path: Path) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    try:
        top = _TOP.decode(data)
    except msgspec.DecodeError:
        return _lenient(data, path)
    except RecursionError:
        raise TracekitError("JSON nested too deeply to read", path) from None
    except msgspec.ValidationError:  # not an object at top level
        raise TracekitError(_shape_problem(data, path), path) from None
    try:
        meta = {k: msgspec.json.decode(v) for k, v in top.items() if k != "traceEvents"}
    except (msgspec.DecodeError, RecursionError):
        return _lenient(data, path)
    raw = top.get("traceEvents")
    if raw is None:
        raise TracekitError("no traceEvents: not a Chrome trace", path)
    try:
        events = _EVENTS.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return _lenient(data, path)
    except RecursionError:
        raise TracekitError("JSON nested too deeply to read", path) from None
    columns, notes = _typed_columns(events)
    return meta, columns, notes


def json_error(
    e: json.JSONDecodeError | UnicodeDecodeError | RecursionError, path: Path
) -> TracekitError:
    """The one-line error for a document stdlib JSON could not read."""
    if isinstance(e, json.JSONDecodeError):
        where = f"{e.msg} at line {e.lineno} column {e.colno}"
        return TracekitError(f"not valid JSON, possibly truncated ({where})", path)
    if isinstance(e, UnicodeDecodeError):
        return TracekitError("not a text JSON file (undecodable bytes)", path)
    return TracekitError("JSON nested too deeply to read", path)


def _lenient(data: bytes, path: Path) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """Untyped decode (stdlib JSON, which also reads NaN and Infinity) for odd documents."""
    try:
        doc = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise json_error(e, path) from None
    if not isinstance(doc, dict):
        raise TracekitError(
            f"top-level JSON is a {type(doc).__name__}; expected an object with traceEvents", path
        )
    if "traceEvents" not in doc:
        raise TracekitError("no traceEvents: not a Chrome trace", path)
    events = doc["traceEvents"]
    if not isinstance(events, list):
        raise TracekitError(f"traceEvents is a {type(events).__name__}; expected a list", path)
    if not all(isinstance(e, dict) for e in events):
        raise TracekitError("traceEvents holds non-object entries", path)
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    columns, notes = _columns(events)
    return meta, columns, notes


def _shape_problem(data: bytes, path: Path) -> str:
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return "not a Chrome trace object"
    return f"top-level JSON is a {type(doc).__name__}; expected an object with traceEvents"


# --- columns -------------------------------------------------------------------------------

_BASE = ("cat", "name", "pid", "tid", "ts", "dur")
assert Event.__struct_fields__ == ("ph", *_BASE, "args")


def _typed_columns(events: list[Event]) -> tuple[dict[str, Any], list[str]]:
    """Columns of the typed events that HTA keeps (see _columns): typed arrays straight away
    when all of them are usable (the types are the decoder's), else lists that keep_usable
    checks one by one."""
    others: list[Event] = []
    kept = [  # one pass: the others go to ``others`` (append returns None, so they are left out)
        e
        for e in events
        if (e.dur is not None and e.cat is not None and e.cat != "Trace") or others.append(e)
    ]
    lacking = [
        (e.dur is None, e.cat is None)
        for e in others
        if (e.dur is None or e.cat is None) and e.ph == "X"
    ]
    missing = _missing(lacking)
    n = len(kept)
    ts = _times(map(attrgetter("ts"), kept), n)
    dur = _times(map(attrgetter("dur"), kept), n)
    names = list(map(attrgetter("name"), kept))
    clean = ts is not None and dur is not None and None not in names
    if not (clean and _usable(ts, dur).all() and not (dur < 0).any()):
        # an odd value: lists, checked one by one (dropped with a note, or refused in _frame)
        return keep_usable(_struct_fields(kept), missing)
    args = [e.args or _NO_ARGS for e in kept]
    cols: dict[str, Any] = {
        "cat": np.fromiter(map(attrgetter("cat"), kept), object, n),
        "name": np.fromiter(names, object, n),
        "pid": _ids(list(map(attrgetter("pid"), kept))),
        "tid": _ids(list(map(attrgetter("tid"), kept))),
        "ts": ts,
        "dur": dur,
    }
    for name, kind in ARG_COLUMNS:
        values = map(attrgetter(name), args)
        if name == "stream":
            cols[name] = _ids(list(values))
        elif kind == "int":  # Int64 fields: every value is an int that fits
            cols[name] = np.fromiter(values, np.int64, n)
        else:  # str fields hold str only; object fields hold what the trace has (lists too)
            cols[name] = np.fromiter(values, object, n)
    return cols, [f"{count} events dropped: {why}" for why, count in missing.items() if count]


def _times(values: Iterator[int | float | None], n: int) -> np.ndarray | None:
    """ts or dur values as float64; None when one is missing or not below 2**53 (keep_usable
    says which). Below 2**53, _ns gives the same nanoseconds as of time_column's int64."""
    try:
        array = np.fromiter(values, np.float64, n)
    except (TypeError, OverflowError):
        return None
    return array if (np.abs(array) < 2**53).all() else None


def _ids(values: list[Any]) -> np.ndarray:
    """id_column of typed values (int, float, str or None, never bool)."""
    try:
        array = np.array(values)
    except OverflowError:
        array = None
    if array is not None and array.dtype == np.int64:
        return array
    return id_column(values)


def _struct_fields(events: Sequence[Event]) -> dict[str, list[Any]]:
    cols = {f: list(map(attrgetter(f), events)) for f in _BASE}
    args = [e.args or _NO_ARGS for e in events]
    return cols | {f: list(map(attrgetter(f), args)) for f in ARG_DEFAULTS}


_RAW_ARG = {
    "external_id": "External id",
    "collective_name": "Collective name",
    "in_msg_nelems": "In msg nelems",
    "out_msg_nelems": "Out msg nelems",
    "msg_dtype": "dtype",
    "input_dims": "Input Dims",
    "input_type": "Input type",
    "pg_name": "Process Group Name",
    "pg_desc": "Process Group Description",
    "pg_ranks": "Process Group Ranks",
    "group_size": "Group size",
}


def _dict_fields(events: Sequence[dict[str, Any]]) -> dict[str, list[Any]]:
    cols: dict[str, list[Any]] = {f: [e.get(f) for e in events] for f in _BASE}
    args = [a if isinstance(a := e.get("args"), dict) else {} for e in events]
    for name, _ in ARG_COLUMNS:
        key, default = _RAW_ARG.get(name, name), ARG_DEFAULTS[name]
        cols[name] = [a.get(key, default) for a in args]
    return cols


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _columns(events: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    """Keep the events HTA keeps (a duration and a category, not 'Trace'); count complete
    ('X') events that lack either; build the columns of the kept ones and check their values."""
    kept = [e for e in events if _hta_keeps(e.get("dur"), e.get("cat"))]
    lacking = [(e.get("dur") is None, e.get("cat") is None) for e in events if e.get("ph") == "X"]
    return keep_usable(_dict_fields(kept), _missing(lacking))


def _missing(lacking: list[tuple[bool, bool]]) -> dict[str, int]:
    """Dropped-event counts of complete events that lack (dur, cat)."""
    return {
        "invalid dur": sum(d for d, _ in lacking),
        "missing cat": sum(c and not d for d, c in lacking),
    }


def _hta_keeps(dur: object, cat: object) -> bool:
    return dur is not None and cat is not None and cat != "Trace"


def keep_usable(
    cols: dict[str, list[Any]], dropped: dict[str, int] | None = None
) -> tuple[dict[str, list[Any]], list[str]]:
    """Drop the events whose category, timestamp or duration cannot be used (not a string, not
    a finite number, beyond int64 ns, longer than 7 days) and say how many, and why, in notes."""
    dropped = {k: v for k, v in (dropped or {}).items() if v}
    cat, ts, dur = cols["cat"], cols["ts"], cols["dur"]
    try:
        t = np.array(ts, dtype=np.float64)
        d = np.array(dur, dtype=np.float64)
        kinds = set(map(type, ts)) | set(map(type, dur))
        ok = set(map(type, cat)) <= {str} and bool not in kinds
    except (TypeError, ValueError, OverflowError):
        ok = False
    if ok:
        ok = bool(_usable(t, d).all())
    if not ok:
        keep = [_why_unusable(c, x, y) for c, x, y in zip(cat, ts, dur, strict=True)]
        for why in keep:
            if why:
                dropped[why] = dropped.get(why, 0) + 1
        getter = [i for i, why in enumerate(keep) if not why]
        cols = {k: [v[i] for i in getter] for k, v in cols.items()}
    notes = [f"{count} events dropped: {why}" for why, count in dropped.items()]
    return cols, notes


def _usable(ts: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Which (ts, dur) pairs are finite and fit int64 ns, with dur at most 7 days."""
    t, d = ts.astype(np.float64), dur.astype(np.float64)
    with np.errstate(invalid="ignore"):
        good = np.isfinite(t) & np.isfinite(d) & (np.abs(t) + np.abs(d) <= _MAX_US)
        return good & (d <= MAX_EVENT_US)


def _why_unusable(cat: object, ts: object, dur: object) -> str:
    if not isinstance(cat, str):
        return "invalid cat"
    if not _is_number(dur) or not math.isfinite(dur):  # type: ignore[arg-type]
        return "invalid dur"
    if not _is_number(ts) or not math.isfinite(ts):  # type: ignore[arg-type]
        return "invalid ts"
    if abs(ts) > _MAX_US or abs(ts) + abs(dur) > _MAX_US:  # type: ignore[arg-type]
        return "timestamp beyond int64 ns"
    if dur > MAX_EVENT_US:  # type: ignore[operator]
        return "duration longer than 7 days"
    return ""


# --- typed arrays --------------------------------------------------------------------------


def int_column(values: Iterable[Any], default: int) -> tuple[np.ndarray, int]:
    """int64 array of integer values; ``default`` for missing ones; also how many values were
    present but not an integer that fits int64 (strings, lists, 1.5, 1e30: replaced by the
    default, never coerced)."""
    values = list(values)
    kinds = set(map(type, values))
    if kinds <= {int}:
        try:
            return np.array(values, dtype=np.int64), 0
        except OverflowError:
            pass
    out = np.empty(len(values), dtype=np.int64)
    bad = 0
    for i, v in enumerate(values):
        if type(v) is int and -INT64_MAX <= v <= INT64_MAX:
            out[i] = v
        elif type(v) is float and v.is_integer() and abs(v) <= 2**53:
            out[i] = int(v)
        else:
            out[i] = default
            bad += v is not None and v != default
    return out, bad


def id_column(values: Iterable[Any]) -> np.ndarray:
    """pid/tid as HTA reads them (pandas.to_numeric, else -1): numbers and numeric strings."""
    values = list(values)
    if set(map(type, values)) <= {int}:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            pass
    out = np.full(len(values), -1, dtype=np.int64)
    for i, v in enumerate(values):
        if isinstance(v, str):
            v = v.strip()
            v = int(v) if v.lstrip("-").isdigit() else None
        if type(v) is int and -INT64_MAX <= v <= INT64_MAX:
            out[i] = v
        elif type(v) is float and math.isfinite(v) and abs(v) < 2**63:
            out[i] = int(v)
    return out


def str_column(values: Iterable[Any]) -> np.ndarray:
    """Object array of strings; '' for anything that is not a string."""
    values = list(values)
    if set(map(type, values)) <= {str}:
        return object_column(values)
    return object_column([v if isinstance(v, str) else "" for v in values])


def object_column(values: Iterable[Any]) -> np.ndarray:
    """1-D object array of the values (lists stay list elements)."""
    values = values if isinstance(values, list) else list(values)
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def time_column(values: Sequence[int | float] | np.ndarray) -> np.ndarray:
    """ts or dur as HTA's frame holds them: int64 when every value is an int, else float64."""
    if isinstance(values, np.ndarray):  # the typed decode's, made so already
        return values
    if set(map(type, values)) <= {int}:
        return np.array(values, dtype=np.int64)
    return np.array(values, dtype=np.float64)
