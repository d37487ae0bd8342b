"""Every ```python block of README.md and docs/*.md runs, and prints what it says.

The convention (also in DEVELOPERS.md):

- The blocks of one page run in order in one namespace, as one interpreter
  session would (a page reads top to bottom), in a temporary directory of the
  page's own, with a default detector of the page's own.
- A block prints exactly the lines its ``# prints: ...`` comments promise, in
  order (``...`` in a promise matches any text); a block without such comments
  prints nothing.
- An HTML comment on the line before the fence changes that:
  ``<!-- docs-test: needs a Spark cluster -->`` (anything after ``needs``) marks a
  block that needs something the suite does not have: it is compiled, not run;
  ``<!-- docs-test: standalone -->`` runs the block in a namespace of its own;
  ``<!-- docs-test: module myapp.rules -->`` makes the block that module: it is
  written to ``myapp/rules.py`` in the page's directory (importable while the
  page runs, also by the processes it starts) and imported, so later blocks can
  import it and name ``myapp.rules:detector`` as applications do.

Blocks in other languages are code too, and each one either runs or says why
it cannot:

- ``<!-- docs-test: run -->`` before a ```sh block runs each of its lines, which
  must be ``sentinel`` commands, in the page's session (its directory, after the
  page's earlier blocks); each must exit with 0.
- ``<!-- docs-test: output of sentinel ... -->`` before a ```text block (what a
  command prints) runs that command in the page's session and compares: the
  block is the whole output, line by line (``...`` in a line matches any text);
  ``<!-- docs-test: excerpt of sentinel ... -->`` only asks the block's lines to
  appear in the output, in order.
- ``<!-- docs-test: needs ... -->`` says what else a block needs (a server, a
  cluster, your application); it is not run, but every ``sentinel`` command in
  it must name commands and options that exist.
- A ```text block that is none of these is prose set in a fixed font (a
  grammar's synopsis, a diagram), not code.

New pages under docs/ are picked up without any change here. A test's id is
``page:line`` (the line of the opening fence).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import re
import shlex
import sys
import textwrap
import threading
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[ \t]*$")
MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<what>.*?)\s*-->\s*$")
PROMISE = re.compile(r"#\s*prints:\s?(.*)$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based, the opening fence
    code: str
    needs: str | None = None  # compile only: what it needs that the suite lacks
    standalone: bool = False
    module: str | None = None  # the block is this module's source
    lang: str = "python"
    run: bool = False  # a shell block whose sentinel commands run
    command: str | None = None  # a text block: what this command prints
    excerpt: bool = False  # ... or lines of it, in order

    @property
    def id(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"

    def promises(self) -> list[str]:
        return [m.group(1).strip() for m in map(PROMISE.search, self.code.splitlines()) if m]


def parse(page: Path) -> list[Block]:
    """The page's fenced blocks, with their markers; raises ValueError for a
    marker that says something this harness does not know."""
    lines = page.read_text("utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang, start = m.group("indent"), m.group("lang"), i
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        i += 1
        needs, standalone, module, run, command, excerpt = None, False, None, False, None, False
        marker = MARKER.match(lines[start - 1]) if start else None
        if marker:
            what = marker.group("what")
            if what == "standalone" and lang == "python":
                standalone = True
            elif what.startswith("needs "):
                needs = what.removeprefix("needs ")
            elif re.fullmatch(r"module [\w.]+", what) and lang == "python":
                module = what.removeprefix("module ")
            elif what == "run" and lang == "sh":
                run = True
            elif re.match(r"(output|excerpt) of sentinel ", what) and lang == "text":
                kind, _, command = what.partition(" of ")
                excerpt = kind == "excerpt"
            else:
                raise ValueError(
                    f"{page.name}:{start}: unknown docs-test marker {what!r} for a {lang} block"
                )
        code = textwrap.dedent("\n".join(body)) if indent else "\n".join(body)
        blocks.append(
            Block(
                page, start + 1, code + "\n", needs, standalone, module,
                lang, run, command, excerpt,
            )
        )  # fmt: skip
    return blocks


BLOCKS = [b for page in PAGES for b in parse(page)]
#: What runs, in each page's session: Python blocks, shell blocks, commands' outputs.
RUN = [
    b for b in BLOCKS if b.needs is None and (b.lang == "python" or b.run or b.command is not None)
]
COMPILE = [b for b in BLOCKS if b.needs is not None and b.lang == "python"]
#: Shell blocks that are not run: their sentinel commands must exist as written.
SHELL = [b for b in BLOCKS if b.lang == "sh" and not b.run]


@dataclass
class PageSession:
    """One page's interpreter session: its namespace, directory, default detector."""

    blocks: list[Block] = field(repr=False)
    directory: Path
    namespace: dict[str, Any] = field(default_factory=dict, repr=False)
    done: int = 0  # blocks run so far
    failed: str | None = None
    closed: bool = False
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, repr=False)
    attached_before: set[int] = field(default_factory=set, repr=False)  # ids of attachments
    threads_before: set[threading.Thread] = field(default_factory=set, repr=False)
    engines: list[Any] = field(default_factory=list, repr=False)  # those the blocks used

    def __post_init__(self) -> None:
        from sentinel import LocalEventDetector, using_default_detector

        # A real module, so that what needs one (SQLAlchemy's annotations,
        # pickling) finds the page's classes; the page's directory on sys.path
        # and PYTHONPATH for the modules the page writes.
        page = types.ModuleType(f"_docs_{self.directory.name}")
        sys.modules[page.__name__] = page
        self.namespace = page.__dict__
        self.stack.callback(sys.modules.pop, page.__name__, None)
        self.stack.enter_context(using_default_detector(LocalEventDetector()))
        self.stack.enter_context(pytest.MonkeyPatch.context()).syspath_prepend(str(self.directory))
        mp = self.stack.enter_context(pytest.MonkeyPatch.context())
        mp.setenv(
            "PYTHONPATH",
            os.pathsep.join(filter(None, [str(self.directory), os.environ.get("PYTHONPATH")])),
        )
        self.stack.callback(self.forget_modules)
        from sentinel.orm.attach import attachments

        self.attached_before = set(map(id, attachments()))
        self.threads_before = set(threading.enumerate())

    def forget_modules(self) -> None:
        for name in list(sys.modules):
            module = sys.modules[name]
            if str(getattr(module, "__file__", None) or "").startswith(str(self.directory)):
                del sys.modules[name]

    def run_until(self, block: Block) -> list[str]:
        """Run the page's blocks up to ``block`` (those not run yet), and return
        what ``block`` printed."""
        for b in self.blocks[self.done :]:
            if self.failed:
                pytest.fail(f"an earlier block of the page failed: {self.failed}")
            try:
                printed = self.execute(b)
            except BaseException:
                self.failed = b.id
                raise
            finally:
                self.done += 1
            if b is block:
                return printed
        raise AssertionError(f"{block.id} was run already")

    def record_engine(self, conn: Any) -> None:
        if not any(e is conn.engine for e in self.engines):
            self.engines.append(conn.engine)

    def execute(self, block: Block) -> list[str]:
        from sqlalchemy import event
        from sqlalchemy.engine import Engine

        namespace = {"__name__": "_docs_standalone"} if block.standalone else self.namespace
        out = io.StringIO()
        cwd = os.getcwd()
        os.chdir(self.directory)
        # every engine a block connects to, so that close() disposes of it also
        # when no name of the page holds it any more (`engine` named another)
        event.listen(Engine, "engine_connect", self.record_engine)
        try:
            if block.lang != "python":
                return self.run_commands(block)
            with contextlib.redirect_stdout(out):
                if block.module:
                    self.write_module(block)
                    sys.modules.pop(block.module, None)  # another page's, or a test's
                    importlib.import_module(block.module)
                else:
                    exec(compile(block.code, block.id, "exec"), namespace)
        finally:
            event.remove(Engine, "engine_connect", self.record_engine)
            os.chdir(cwd)
        return out.getvalue().splitlines()

    def run_commands(self, block: Block) -> list[str]:
        """Run a shell block's commands (each must succeed), or the command whose
        output a text block shows; return what the last one printed."""
        from click.testing import CliRunner

        from sentinel.cli import main

        commands = [block.command] if block.command else sentinel_commands(block)
        printed: list[str] = []
        for command in commands:
            assert command is not None
            result = CliRunner().invoke(main, shlex.split(command)[1:], catch_exceptions=False)
            assert result.exit_code == 0, f"{block.id}: `{command}` failed:\n{result.output}"
            printed = result.output.splitlines()
        return printed

    def write_module(self, block: Block) -> None:
        assert block.module
        *packages, name = block.module.split(".")
        folder = self.directory
        for package in packages:
            folder = folder / package
            folder.mkdir(exist_ok=True)
            (folder / "__init__.py").touch()
        (folder / f"{name}.py").write_text(block.code, "utf-8")
        importlib.invalidate_caches()

    def close(self) -> None:
        """(Once) Detach what the page attached and dispose its engines, so no worker
        thread or connection outlives the page."""
        from sqlalchemy.engine import Engine

        from sentinel.orm import Attachment
        from sentinel.orm.attach import attachments

        if self.closed:
            return
        self.closed = True
        # Every attachment the page made, also those no name holds any more (a
        # page that says `attachment = attach(...)` twice): an attachment left
        # attached keeps its worker threads, and a retry they run later prints
        # into whichever block is running then (redirect_stdout is global), so a
        # later page's block would fail or pass depending on timing.
        made = [a for a in attachments() if id(a) not in self.attached_before]
        for value in [*list(self.namespace.values()), *made]:
            if isinstance(value, Attachment):
                with contextlib.suppress(Exception):
                    value.detach()
        for value in [*list(self.namespace.values()), *self.engines]:
            if isinstance(value, Engine) and not value.dialect.is_async:
                value.dispose()
        self.stack.close()
        # Nothing the page started may outlive it (see above).
        left = [t for t in threading.enumerate() if t not in self.threads_before]
        for t in left:
            t.join(10)
        alive = sorted(t.name for t in left if t.is_alive())
        assert not alive, f"threads the page started outlive it: {alive}"


class PageSessions:
    """The pages' sessions, made on first use, closed at the end of the test run
    (or earlier, when a page's last block has run)."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self.factory = factory
        self.sessions: dict[Path, PageSession] = {}

    def __getitem__(self, page: Path) -> PageSession:
        if page not in self.sessions:
            blocks = [b for b in RUN if b.page == page]
            self.sessions[page] = PageSession(blocks, self.factory.mktemp(page.stem))
        return self.sessions[page]


@pytest.fixture(scope="session")
def page_sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PageSessions]:
    sessions = PageSessions(tmp_path_factory)
    yield sessions
    for s in sessions.sessions.values():
        s.close()


def matches(promise: str, line: str) -> bool:
    pattern = ".*".join(re.escape(part) for part in promise.split("..."))
    return re.fullmatch(pattern, line.strip()) is not None


def sentinel_commands(block: Block) -> list[str]:
    """The ``sentinel`` command lines of a shell block, without their comments;
    a line that is not a ``sentinel`` command is an error for a block that runs."""
    commands = []
    for line in block.code.splitlines():
        line = line.split(" #", 1)[0].strip()
        if line.startswith("sentinel "):
            commands.append(line)
        elif line and block.run:
            raise AssertionError(f"{block.id}: only sentinel commands run here, not {line!r}")
    return commands


def shows(block: Block, printed: list[str]) -> bool:
    """Whether a text block shows what was printed (see the module docs)."""

    def same(shown: str, line: str) -> bool:  # as matches(), indentation included
        pattern = ".*".join(re.escape(part) for part in shown.split("..."))
        return re.fullmatch(pattern, line) is not None

    shown = [line.rstrip() for line in block.code.rstrip("\n").splitlines()]
    printed = [line.rstrip() for line in printed]
    if not block.excerpt:
        return len(shown) == len(printed) and all(map(same, shown, printed))
    it = iter(printed)
    return all(any(same(line, p) for p in it) for line in shown)


def test_every_page_is_found() -> None:
    names = {p.name for p in PAGES}
    assert {"README.md", "guide.md", "testing.md"} <= names
    assert len(RUN) >= 20


@pytest.mark.parametrize("block", RUN, ids=[b.id for b in RUN])
def test_block_runs_and_prints_what_it_promises(block: Block, page_sessions: PageSessions) -> None:
    session = page_sessions[block.page]
    try:
        printed = session.run_until(block)
    finally:
        if block is session.blocks[-1]:  # the page is over, whether or not it passed
            session.close()
    if block.lang == "text":
        assert shows(block, printed), (
            f"{block.id} shows what `{block.command}` prints; it printed:\n" + "\n".join(printed)
        )
        return
    promised = block.promises()
    assert len(printed) == len(promised) and all(map(matches, promised, printed)), (
        f"{block.id} promises {promised}, printed {printed}"
    )


@pytest.mark.parametrize("block", COMPILE, ids=[b.id for b in COMPILE])
def test_block_that_needs_more_compiles(block: Block) -> None:
    compile(block.code, block.id, "exec")
    assert not block.promises() or block.needs  # says what it needs to print them


def test_every_block_runs_or_says_why_not() -> None:
    """A block in another language than Python runs, shows a command's output,
    says what it needs, or is ```text (prose in a fixed font)."""
    silent = [
        b.id
        for b in BLOCKS
        if b.lang != "python"
        and not (b.run or b.command or b.needs is not None or b.lang == "text")
    ]
    assert not silent, f"blocks that neither run nor say what they need: {silent}"


def command_problems(block: Block) -> list[str]:
    """What is wrong with the ``sentinel`` commands of a block that is not run:
    a command that does not exist, an option it does not take (``[...]`` marks an
    optional part; values may be placeholders)."""
    import click

    from sentinel.cli import main

    problems = []
    for line in sentinel_commands(block):
        words = shlex.split(line.replace("[", " ").replace("]", " "))[1:]
        command: click.Command | None = main
        while isinstance(command, click.Group) and words and not words[0].startswith("-"):
            sub = command.get_command(click.Context(command), words[0])
            if sub is None:
                problems.append(f"`{line}`: no command {words[0]!r}")
            command, words = sub, words[1:]
        if command is None:
            continue
        known = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
        for word in words:
            option = word.split("=")[0]
            if option.startswith("-") and option not in known:
                problems.append(f"`{line}`: {command.name} has no option {option}")
    return problems


@pytest.mark.parametrize("block", SHELL, ids=[b.id for b in SHELL])
def test_shown_commands_exist_as_written(block: Block) -> None:
    """Each ``sentinel`` command of a block that cannot run names a command that
    exists, with options it takes."""
    assert not command_problems(block), f"{block.id}: {command_problems(block)}"


def test_a_shown_command_that_does_not_exist_is_found(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(
        "<!-- docs-test: needs a server -->\n```sh\n"
        "sentinel db upgrade --url ... [--sql]   # fine\n"
        "sentinel db upgrade --ulr ...\n"
        "sentinel log shows --url ...\n"
        "pip install sqlalchemy-sentinel\n```\n"
    )
    (block,) = parse(page)
    assert command_problems(block) == [
        "`sentinel db upgrade --ulr ...`: upgrade has no option --ulr",
        "`sentinel log shows --url ...`: no command 'shows'",
    ]


def test_markers_are_understood(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(
        "<!-- docs-test: module app.rules -->\n```python\nw = 0\n```\n"
        "<!-- docs-test: needs a Spark cluster -->\n```python\nx = 1\n```\n\n"
        "<!-- docs-test: standalone -->\n```python\ny = 2  # prints: 2\n```\n"
        "```sh\nls\n```\n  ```python\n  z = 3\n  ```\n"
    )
    m, a, b, sh, c = parse(page)
    assert (m.module, m.needs, m.line) == ("app.rules", None, 2)
    assert (sh.lang, sh.run, sh.needs) == ("sh", False, None)
    assert (a.needs, a.standalone, a.line) == ("a Spark cluster", False, 6)
    assert (b.needs, b.standalone, b.promises()) == (None, True, ["2"])
    assert c.code == "z = 3\n" and c.line == 17
    page.write_text("<!-- docs-test: nedds spark -->\n```python\nx = 1\n```\n")
    with pytest.raises(ValueError, match="unknown docs-test marker"):
        parse(page)


def test_promises_match_whole_lines() -> None:
    assert matches("order 7 fulfilled", "order 7 fulfilled")
    assert matches("R1 fired with ... at commit", "R1 fired with (1, 2) at commit")
    assert not matches("order 7", "order 7 fulfilled")


def test_a_page_leaves_no_attachment_behind(tmp_path: Path) -> None:
    """Also one no name holds any more: its worker threads would run on into
    later pages, whose blocks capture whatever they print."""
    from sentinel.orm.attach import attachments

    page = tmp_path / "p.md"
    page.write_text(
        "```python\n"
        "import sqlalchemy as sa\n"
        "from sqlalchemy.orm import sessionmaker\n"
        "import sentinel\n"
        "attachment = sentinel.attach(sessionmaker(), log=False, workers=1)\n"
        "attachment = sentinel.attach(sessionmaker(), log=False, workers=1)\n"
        "```\n"
    )
    before = attachments()
    (tmp_path / "run").mkdir()
    session = PageSession(parse(page), tmp_path / "run")
    try:
        session.run_until(session.blocks[-1])
        assert len(attachments()) == len(before) + 2
    finally:
        session.close()
    assert attachments() == before
