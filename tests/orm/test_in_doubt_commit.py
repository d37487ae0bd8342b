"""A commit whose reply is lost (issue 28, item 11).

COMMIT reached the database and the transaction committed there, but the
connection was cut before the reply came back: the driver raises, SQLAlchemy
rolls the session back, and the process cannot tell from the exception whether
the data is committed. sentinel's log rows are written in the transaction, so
the log is the witness: sentinel asks the database whether the transaction's
rows are there and treats the transaction as what the database did."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from sentinel.log import LogReader
from sentinel.orm import attach

from . import actions
from .conftest import ORM


@contextlib.contextmanager
def reply_lost(
    engine: sa.Engine, *, reached: bool = True, down: bool = False
) -> Iterator[list[int]]:
    """The next DBAPI commit is cut: it reaches the database and commits
    (``reached``), or is lost on the way (the database rolls back), and either
    way the connection is gone before a reply: the driver's connection is
    closed and the driver's OperationalError raised, as when the network
    fails. With ``down``, new connections fail from then on (until the block
    ends): the network stays down."""
    dialect = engine.dialect
    original = dialect.do_commit
    connect = engine.connect
    cut: list[int] = []

    def refused() -> Any:
        raise sa.exc.OperationalError("connect", {}, Exception("connection refused"))

    def do_commit(dbapi_connection: Any) -> None:
        if cut:
            original(dbapi_connection)
            return
        cut.append(1)
        if reached:
            original(dbapi_connection)
        raw = getattr(dbapi_connection, "dbapi_connection", dbapi_connection)
        with contextlib.suppress(Exception):
            raw.close()  # the driver's connection, not the pool's wrapper
        if down:
            engine.connect = refused  # type: ignore[method-assign]
        raise dialect.loaded_dbapi.OperationalError("server closed the connection unexpectedly")

    dialect.do_commit = do_commit  # type: ignore[method-assign]
    try:
        yield cut
    finally:
        dialect.do_commit = original  # type: ignore[method-assign]
        engine.connect = connect  # type: ignore[method-assign]


def _set_price_cut(orm: ORM, stock: int, **cut: Any) -> list[int]:
    """Set ``stock``'s price to 7 in a transaction whose commit is cut (see
    :func:`reply_lost`); the commit raises the driver's error."""
    with (
        reply_lost(orm.engine, **cut) as cuts,
        pytest.raises(sa.exc.OperationalError),
        orm.Session.begin() as s,
    ):
        s.get(orm.model.Stock, stock).set_price(7.0)
    return cuts


def _count(orm: ORM, sql: str) -> int:
    with orm.engine.connect() as conn:
        return int(conn.execute(sa.text(sql)).scalar_one())


def test_a_commit_whose_reply_is_lost_counts_as_committed(orm: ORM, caplog: Any) -> None:
    orm.attach()
    (ibm,) = orm.add_stocks("IBM")
    commits: list[Any] = []
    aborts: list[Any] = []
    orm.det.rule("on_commit", "txn:commit", action=commits.append)
    orm.det.rule("on_abort", "txn:abort", action=aborts.append)
    assert _set_price_cut(orm, ibm) == [1]
    assert _count(orm, f"SELECT count(*) FROM stock WHERE id = {ibm} AND price = 7.0") == 1
    assert len(commits) == 1 and aborts == []
    with caplog.at_level(logging.ERROR, logger="sentinel"):
        rows = orm.log()
    ours = [r for r in caplog.records if r.name.startswith("sentinel")]
    assert not [r for r in ours if r.levelno >= logging.ERROR], caplog.text
    mine = [r for r in rows if r.occurrence.event == "Stock.set_price:end"]
    assert [r.outcome for r in mine] == ["committed"]
    names = [r.occurrence.event for r in rows if r.occurrence.scope == mine[0].occurrence.scope]
    assert names.count("txn:commit") == 1 and "txn:abort" not in names


def _rules(orm: ORM) -> tuple[list[Any], list[Any]]:
    commits: list[Any] = []
    aborts: list[Any] = []
    orm.det.rule("on_commit", "txn:commit", action=commits.append)
    orm.det.rule("on_abort", "txn:abort", action=aborts.append)
    return commits, aborts


def test_a_commit_lost_before_the_database_counts_as_aborted(orm: ORM, caplog: Any) -> None:
    orm.attach()
    (ibm,) = orm.add_stocks("IBM")
    commits, aborts = _rules(orm)
    _set_price_cut(orm, ibm, reached=False)
    assert _count(orm, f"SELECT count(*) FROM stock WHERE id = {ibm} AND price = 7.0") == 0
    assert commits == [] and len(aborts) == 1
    with caplog.at_level(logging.WARNING, logger="sentinel"):
        rows = orm.log()
    assert not [r for r in caplog.records if r.name.startswith("sentinel")], caplog.text
    mine = [r for r in rows if r.occurrence.event == "Stock.set_price:end"]
    assert [r.outcome for r in mine] == ["aborted"]


def test_a_commit_nobody_can_confirm_runs_neither_commit_nor_abort_rules(
    orm: ORM, caplog: Any
) -> None:
    """Neither ``txn:commit`` nor ``txn:abort`` on a guess; nothing more is
    logged for it, and what its commit wrote is the log's answer."""
    orm.attach()
    (ibm,) = orm.add_stocks("IBM")
    commits, aborts = _rules(orm)
    with caplog.at_level(logging.ERROR, logger="sentinel"):
        _set_price_cut(orm, ibm, down=True)
    assert commits == [] and aborts == []
    assert "whether it committed is unknown" in caplog.text
    rows = orm.log()  # no duplicate rows, no LogWriteError
    mine = [r for r in rows if r.occurrence.event == "Stock.set_price:end"]
    assert [r.outcome for r in mine] == ["committed"]
    # the next transaction goes on as usual
    with orm.Session.begin() as s:
        s.get(orm.model.Stock, ibm).set_price(8.0)
    assert len(commits) == 1 and aborts == []


@pytest.mark.parametrize("reached", [True, False], ids=["committed", "rolled-back"])
def test_detached_rules_of_a_commit_whose_reply_is_lost_run_as_the_database_decided(
    orm: ORM, reached: bool
) -> None:
    """The outbox entries are written in the transaction: a detached rule that
    depends on the commit runs once if it committed, never if it did not; an
    independent one runs once either way."""
    att = orm.attach()
    (ibm,) = orm.add_stocks("IBM")
    orm.det.rule("dep", "Stock.set_price:end", action=actions.record, coupling="detached")
    orm.det.rule(
        "indep", "Stock.set_price:end", action=actions.record, coupling="detached independent"
    )
    _set_price_cut(orm, ibm, reached=reached)
    assert att.wait_detached(60)
    ran = sorted(e[0] for e in orm.effects())
    assert ran == (["dep", "indep"] if reached else ["indep"])
    assert sorted(e.status for e in orm.outbox()) == ["done"] * len(ran)


def test_a_commit_whose_reply_is_lost_without_a_log_asks_the_outbox(orm: ORM) -> None:
    att = orm.attach(log=False)
    (ibm,) = orm.add_stocks("IBM")
    commits, aborts = _rules(orm)
    orm.det.rule("dep", "Stock.set_price:end", action=actions.record, coupling="detached")
    _set_price_cut(orm, ibm)
    assert len(commits) == 1 and aborts == []
    assert att.wait_detached(60)
    assert [e[0] for e in orm.effects()] == ["dep"]


class CuttingProxy:
    """A TCP proxy in front of a database server that, once ``armed``, passes
    the next ``COMMIT`` on to the server, waits for the server's reply and
    drops it, cutting both connections: the network failing at the worst
    moment, for real (the server committed; the client never hears it)."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)  # the accept loop sees close() within 0.1 s
        self.port = self.listener.getsockname()[1]
        self.armed = threading.Event()
        self.committing = threading.Event()
        self.cuts = 0
        self.closed = False
        self.sockets: list[socket.socket] = []
        self.threads: list[threading.Thread] = []
        self.acceptor = threading.Thread(target=self._accept, daemon=True)
        self.acceptor.start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            server = socket.create_connection(self.target)
            self.sockets += [client, server]
            for pump, ends in ((self._up, (client, server)), (self._down, (server, client))):
                self.threads.append(threading.Thread(target=pump, args=ends, daemon=True))
                self.threads[-1].start()

    def _up(self, client: socket.socket, server: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                if b"COMMIT" in data and self.armed.is_set():
                    self.armed.clear()
                    self.committing.set()  # before it is sent: the reply is dropped
                server.sendall(data)

    def _down(self, server: socket.socket, client: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := server.recv(65536):
                if self.committing.is_set():
                    self.committing.clear()
                    self.cuts += 1  # the server answered COMMIT: it committed
                    for s in (client, server):
                        with contextlib.suppress(OSError):
                            s.shutdown(socket.SHUT_RDWR)
                    return
                client.sendall(data)

    def close(self) -> None:
        """Stop accepting, cut what is still connected, wait for the threads and
        close every socket (a socket left to the garbage collector is a
        ResourceWarning)."""
        self.closed = True
        self.acceptor.join(timeout=10)
        self.listener.close()
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)  # ends the pumps' recv()
        for t in self.threads:
            t.join(timeout=10)
        for s in self.sockets:
            s.close()


@pytest.mark.parametrize("backend", ["postgresql", "mysql"], indirect=True)
def test_a_connection_cut_after_commit_reached_the_server(orm: ORM, db_url: str) -> None:
    """The same through a real cut: a proxy between the application and the
    server drops the reply to COMMIT and both connections (servers only: an
    embedded database has no connection to cut)."""
    url = sa.make_url(db_url)
    proxy = CuttingProxy(url.host or "127.0.0.1", url.port or 0)
    engine = sa.create_engine(url.set(host="127.0.0.1", port=proxy.port))
    try:
        Session = sessionmaker(engine)
        att = attach(Session, detector=orm.det, workers=0)
        (ibm,) = orm.add_stocks("IBM")
        with Session.begin() as s:  # a warm connection: the cut is at COMMIT
            s.get(orm.model.Stock, ibm)
        commits, aborts = _rules(orm)
        proxy.armed.set()
        with pytest.raises(sa.exc.OperationalError), Session.begin() as s:
            s.get(orm.model.Stock, ibm).set_price(7.0)
        assert proxy.cuts == 1
        assert _count(orm, f"SELECT count(*) FROM stock WHERE id = {ibm} AND price = 7.0") == 1
        assert len(commits) == 1 and aborts == []
        with LogReader(orm.engine) as reader:
            rows = list(reader.occurrences())
        mine = [r for r in rows if r.occurrence.event == "Stock.set_price:end"]
        assert [r.outcome for r in mine] == ["committed"]
    finally:
        att.detach()
        engine.dispose()
        proxy.close()
