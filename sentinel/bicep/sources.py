"""Where announcements come from, besides :meth:`Processor.announce`.

- **Stream files** (:func:`read_stream`): JSON lines (``.jsonl``, ``.json``) or
  CSV (``.csv``), one announcement per line or row::

      {"class": "Delivery", "occ": "2014-04-07T09:00", "det": "2014-04-03T16:01",
       "resource": "Milk", "amount": 2}
      {"class": "Delivery", "det": "2014-04-05T10:00", "revoke": true, "resource": "Milk"}

  A CSV file has a header with ``class``, ``occ``, ``det``, optionally
  ``revoke``, and the attributes of every class it announces (empty cells are
  missing values; cells are converted to the attribute's type).
  :func:`load_stream` writes a file's announcements into the inboxes.
- **Rows the application inserts** into a class's inbox table
  (``<prefix><program>_i_<class>``: ``occtime``, ``dettime`` in seconds since the
  epoch, ``revoked`` 0 or 1, and the attributes), in its own transactions.
- **sentinel events** (:func:`connect_event`): every occurrence of an explicit
  event becomes an announcement; its ``at`` is the occurrence time and its
  ``detected_at`` the detection time (parameters ``occ_time`` / ``det_time``
  override them; ``revoked=True`` revokes). Inside a session attached with
  sentinel the announcement is written in the session's transaction.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator, Mapping
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sentinel.bicep.pipeline import older_than_read
from sentinel.errors import BicepAnnouncementError

if TYPE_CHECKING:
    from sentinel.bicep.processor import Processor

__all__ = ["connect_event", "load_stream", "read_stream"]

_META = ("class", "occ", "det", "revoke")


#: The longest line (JSON) or field (CSV) of a stream file read: one announcement
#: is small, and a device or a file without line breaks (``/dev/zero``) is
#: refused rather than read for ever.
MAX_LINE = 1 << 20


def read_stream(path: str | Path) -> Iterator[dict[str, Any]]:
    """The announcements of a stream file, in file order: dicts with ``class``,
    ``occ``, ``det``, ``revoke`` and the attributes. Raises
    :class:`~sentinel.errors.BicepAnnouncementError` naming the line of a
    malformed record, of one longer than :data:`MAX_LINE`, or of text that is not
    UTF-8."""
    p = Path(path)
    try:
        yield from _read_stream(p)
    except UnicodeDecodeError as err:
        raise BicepAnnouncementError(
            f"{p}: not UTF-8 text (byte {err.start} of a line)", event_class="?"
        ) from None


def _read_stream(p: Path) -> Iterator[dict[str, Any]]:
    if p.suffix.lower() == ".csv":
        with p.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            i = 1
            try:
                for i, row in enumerate(reader, start=2):
                    yield _record({k: v for k, v in row.items() if v not in ("", None)}, p, i)
            except csv.Error as err:  # a field over csv.field_size_limit(), a NUL byte
                raise BicepAnnouncementError(f"{p}:{i + 1}: {err}", event_class="?") from None
        return
    with p.open(encoding="utf-8") as f:
        i = 0
        while line := f.readline(MAX_LINE + 1):
            i += 1
            if len(line) > MAX_LINE:
                raise BicepAnnouncementError(
                    f"{p}:{i}: a line longer than {MAX_LINE:,} characters", event_class="?"
                )
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                # numbers with a fraction exactly: a NUMERIC(p, s) keeps every digit
                data = json.loads(line, parse_float=Decimal)
            except json.JSONDecodeError as err:
                raise BicepAnnouncementError(
                    f"{p}:{i}: not a JSON object: {err.msg} at column {err.colno}",
                    event_class="?",
                ) from None
            if not isinstance(data, dict):
                raise BicepAnnouncementError(f"{p}:{i}: not a JSON object", event_class="?")
            yield _record(data, p, i)


def _record(data: Mapping[str, Any], path: Path, line: int) -> dict[str, Any]:
    if "class" not in data:
        raise BicepAnnouncementError(f"{path}:{line}: no 'class' given", event_class="?")
    out = dict(data)
    for k in ("occ", "det"):  # times in seconds: floats, as before
        if isinstance(out.get(k), Decimal):
            out[k] = float(out[k])
    revoke = out.get("revoke", False)
    if isinstance(revoke, str):
        revoke = revoke.strip().lower() in ("1", "true", "yes")
    out["revoke"] = bool(revoke)
    out["_where"] = f"{path}:{line}"
    return out


def _convert(proc: Processor, cls_name: str, attrs: dict[str, Any]) -> dict[str, Any]:
    """Convert CSV text cells to the attributes' types."""
    cls = proc.program.classes.get(cls_name.lower())
    if cls is None:
        return attrs
    out = dict(attrs)
    for a in cls.definition.attributes:
        for key in (a.name, a.ident):
            v = out.get(key)
            kind = a.type.kind
            if isinstance(v, Decimal) and kind != "numeric":
                out[key] = float(v)  # a JSON number (read exactly) for a REAL
                continue
            if not isinstance(v, str):
                continue
            text = v.strip()
            try:
                if kind == "integer":
                    out[key] = int(text)
                elif kind == "numeric":
                    out[key] = Decimal(text)  # exact: NUMERIC(30,10) keeps every digit
                elif kind == "real":
                    out[key] = float(text)
                elif kind == "boolean":
                    out[key] = _BOOLEANS[text.lower()]
            except (ValueError, ArithmeticError, KeyError):
                raise ValueError(
                    f"attribute {a.name} of {cls_name} is {kind}, not {v!r}"
                    + (" (true/false, yes/no, t/f or 1/0)" if kind == "boolean" else "")
                ) from None
    return out


_BOOLEANS = {
    **dict.fromkeys(("1", "true", "yes", "t"), True),
    **dict.fromkeys(("0", "false", "no", "f"), False),
}


def load_stream(proc: Processor, records: Iterable[Mapping[str, Any]]) -> int:
    """Write announcements (as :func:`read_stream` yields them) into the
    processor's inboxes, in batches per class; return how many. A record that
    cannot be announced raises :class:`~sentinel.errors.BicepAnnouncementError`
    naming its file and line, and nothing of the batch is written; so does a
    revision or revocation detected before the version of its event already
    read (with both detection times)."""
    batches: dict[str, list[dict[str, Any]]] = {}
    checked: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for rec in records:
        rec = dict(rec)
        where = rec.pop("_where", "")
        cls = str(rec.pop("class"))
        try:
            row = _convert(proc, cls, rec)
            batches.setdefault(cls, [])
            # check each record now, so the error names its line
            compiled = proc._class(cls)
            stored = proc._row(
                compiled,
                row.get("occ"),
                row.get("det"),
                bool(row.get("revoke")),
                {k: v for k, v in row.items() if k not in _META},
            )
        except (BicepAnnouncementError, ValueError) as err:
            raise BicepAnnouncementError(f"{where}: {err}", event_class=cls) from None
        batches[cls].append(row)
        checked.setdefault(compiled.ident, []).append((where, stored))
    total = 0
    with proc.engine.begin() as conn:
        for ident, rows in checked.items():
            _check_read(proc, conn, ident, rows)
        for cls, batch in batches.items():
            total += proc.announce_many(cls, batch, connection=conn)
    return total


def _check_read(
    proc: Processor, conn: Any, ident: str, rows: list[tuple[str, dict[str, Any]]]
) -> None:
    """Refuse a record detected before the version of its event the processor
    has already read (a revision would turn the event back, its detection time
    backwards), naming its place and both times."""
    pipeline = proc.pipeline
    cs = pipeline.sql[ident]
    if not cs.cls.mutable:
        return  # a second announcement of an IMMUTABLE event is rejected at the tick
    keys = cs.keys
    current = pipeline._current(conn, cs, list({tuple(r[k] for k in keys) for _, r in rows}))
    if not current:
        return
    for where, r in rows:
        now = current.get(tuple(r[k] for k in keys))
        if now is not None and r["dettime"] < now["dettime"]:
            shown = ", ".join(f"{k}={r[k]!r}" for k in keys)
            what = "revocation" if r["revoked"] else "announcement"
            raise BicepAnnouncementError(
                f"{where}: {what} of {cs.cls.name} {shown}: "
                + older_than_read(r["dettime"], now["dettime"]),
                event_class=cs.cls.name,
            )


def connect_event(
    proc: Processor, event_class: str, event: str | None = None, detector: Any = None
) -> Any:
    """Announce every occurrence of the explicit sentinel event ``event``
    (default: the class's name) as an event of ``event_class``; return the rule
    that does it. This is the seam to sentinel's own bitemporal events: an
    occurrence's ``at`` is taken as the occurrence time and ``detected_at`` as the
    detection time."""
    det = detector if detector is not None else proc.detector
    cls = proc._class(event_class)
    name = event or cls.name
    det.explicit(name)
    attrs = {a.ident for a in cls.definition.attributes}

    def announce(occ: Any) -> None:
        params = dict(occ.params)
        revoke = bool(params.pop("revoked", False))
        t_occ = params.pop("occ_time", None)
        t_det = params.pop("det_time", None)
        values = {k: v for k, v in params.items() if k.lower() in attrs}
        conn = None
        try:
            from sentinel.orm.state import session_of

            session = session_of(occ)
            if session is not None:
                conn = session.connection()
        except ImportError:  # pragma: no cover - sentinel.orm always imports
            pass
        proc.announce(
            cls.name,
            occ=t_occ if t_occ is not None else (None if revoke else occ.timestamp),
            det=t_det if t_det is not None else occ.detected_timestamp,
            revoke=revoke,
            connection=conn,
            **values,
        )

    return det.rule(f"bicep:{proc.name}:announce:{cls.name}", name, action=announce)
