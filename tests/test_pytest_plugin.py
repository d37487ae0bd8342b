"""sentinel's pytest plugin, run the way a user's suite runs it (pytester): its
fixtures are there without any conftest, they are fresh per test and undone after
it, the recorder's assertions say what ran instead, and the examples of
docs/testing.md pass as printed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import sentinel
from sentinel import LocalEventDetector
from sentinel.orm.attach import attachments
from sentinel.testing import RuleRecorder

pytest_plugins = ["pytester"]

DOCS = Path(__file__).resolve().parent.parent / "docs"


def page_modules(page: Path) -> dict[str, str]:
    """The blocks of a page marked as module files, by module name."""
    text = page.read_text("utf-8")
    found = re.findall(r"<!-- docs-test: module (\w+) -->\n```python\n(.*?)```", text, re.S)
    return dict(found)


PAGES_WITH_TESTS = [
    p for p in sorted(DOCS.glob("*.md")) if any(m.startswith("test_") for m in page_modules(p))
]


def test_the_testing_pages_are_found() -> None:
    assert {p.name for p in PAGES_WITH_TESTS} >= {"testing.md", "guide.md"}


@pytest.mark.parametrize("page", PAGES_WITH_TESTS, ids=[p.name for p in PAGES_WITH_TESTS])
def test_the_documented_tests_pass(pytester: pytest.Pytester, page: Path) -> None:
    modules = page_modules(page)
    pytester.syspathinsert()
    for name, code in modules.items():
        pytester.makepyfile(**{name: code})
    tests = sum(
        code.count("\ndef test_") + code.startswith("def test_") for code in modules.values()
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=tests)


FIXTURES_ARE_FRESH = """
import sentinel
from sentinel import LocalEventDetector, VirtualClock
from sentinel.orm.attach import attachments
from sentinel.pytest_plugin import START

seen = []

def test_first(sentinel_detector, sentinel_clock, sentinel_sessions, sentinel_recorder):
    assert isinstance(sentinel_clock, VirtualClock) and sentinel_clock.datetime() == START
    assert sentinel_detector.wall_clock is sentinel_clock
    assert sentinel.default_detector() is sentinel_detector
    assert [a.detector for a in attachments()] == [sentinel_detector]
    sentinel_detector.explicit("x")
    sentinel_detector.rule("r", "x", action=lambda o: None)
    sentinel_clock.advance(60)
    seen.append(sentinel_detector)

def test_second(sentinel_detector, sentinel_clock, sentinel_recorder):
    assert sentinel_detector is not seen[0] and not sentinel_detector.rules
    assert sentinel_clock.datetime() == START
    assert attachments() == [] and len(sentinel_recorder) == 0

def test_after():
    assert sentinel.default_detector() is not seen[0]
"""


def test_fixtures_are_fresh_per_test_and_undone_after(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_fresh=FIXTURES_ARE_FRESH)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)


def test_the_plugin_can_be_turned_off(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_off="def test_x(sentinel_detector): pass")
    result = pytester.runpytest_subprocess("-p", "no:sentinel", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'sentinel_detector' not found*"])


FAILING = """
def test_wrong_value(sentinel_detector, sentinel_recorder):
    sentinel_detector.explicit("order")
    sentinel_detector.rule("big", "order", lambda o: o.params["amount"] > 100,
                           action=lambda o: None)
    sentinel_detector.signal("order", amount=150)
    sentinel_recorder.assert_fired("big", params={"amount": 99})
"""


def test_a_failed_assertion_lists_what_ran(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_failing=FAILING)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.re_match_lines(
        [
            r"E\s+AssertionError: rule 'big' did not fire with params\['amount'\] == 99$",
            r"E\s+rule runs:$",
            r"E\s+big \[immediate\] fired: order@1\{'amount': 150\}$",
        ]
    )
    assert "def assert_fired" not in result.stdout.str()  # the recorder's frame is hidden


# -- the recorder itself, against what the rules' actions saw -------------------------
def test_the_recorder_sees_what_the_actions_see() -> None:
    det = LocalEventDetector()
    order, pay = det.explicit("order"), det.explicit("pay")
    acted: dict[str, list[object]] = {"paid": [], "big": [], "late": []}
    det.rule("paid", (order >> pay).by("id"), action=acted["paid"].append, context="chronicle")
    det.rule("big", pay, lambda o: o.params["amount"] > 100, action=acted["big"].append)
    det.rule("late", pay, action=acted["late"].append, coupling="deferred")

    with RuleRecorder(det) as recorder, det.transaction():
        det.signal("order", id=1)
        det.signal("order", id=2)
        det.signal("pay", id=2, amount=500)
        det.signal("pay", id=1, amount=5)
    det.signal("order", id=3)  # after close: not recorded

    assert recorder.fired("paid") == acted["paid"]
    assert recorder.fired("big") == acted["big"]
    assert recorder.fired("late") == acted["late"]
    assert recorder.names() == ["paid", "big", "paid", "late"]
    assert recorder.names("condition_false") == ["big"]
    assert [r.coupling for r in recorder if r.rule == "late"] == ["deferred"]
    recorder.assert_fired("paid", times=2)
    recorder.assert_fired("paid", values={"id": (2, 2)}, times=1)
    assert recorder.assert_fired("big", params={"amount": 500}) is acted["big"][0]
    with pytest.raises(AssertionError, match=r"rule 'paid' fired 2 time\(s\), expected 1"):
        recorder.assert_fired("paid", times=1)
    with pytest.raises(AssertionError, match="expected none"):
        recorder.assert_not_fired("big")
    recorder.assert_not_fired("unknown")


def test_a_failed_run_is_recorded_with_its_error() -> None:
    det = LocalEventDetector()
    det.explicit("e")

    def boom(occ: object) -> None:
        raise ValueError("no")

    det.rule("boom", "e", action=boom)
    with RuleRecorder(det) as recorder, pytest.raises(sentinel.RuleError):
        det.signal("e")
    (run,) = recorder.runs
    assert run.status == "failed" and isinstance(run.error, sentinel.RuleError)
    assert "boom [immediate] failed (RuleError: " in run.describe()


def test_the_recorder_and_an_attachment_both_observe(tmp_path: Path) -> None:
    import sqlalchemy as sa
    from sqlalchemy.orm import sessionmaker

    from sentinel.log import LogReader, migrate

    engine = sa.create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    migrate.upgrade(engine)
    det = LocalEventDetector()
    det.explicit("e")
    det.rule("r", "e", action=lambda o: None)
    before = attachments()
    with RuleRecorder(det) as recorder:
        attachment = sentinel.attach(sessionmaker(engine), detector=det, workers=0)
        try:
            with attachment.target.begin() as session, det.use_scope(sentinel.scope_of(session)):
                det.signal("e")
        finally:
            attachment.detach()
    assert attachments() == before
    assert recorder.names() == ["r"]
    with LogReader(engine) as log:
        assert [f.rule for f in log.firings()] == ["r"]
    engine.dispose()
    assert not det.dispatch.rule_run  # both removed


def test_assert_fired_refuses_a_values_entry_that_is_not_a_tuple_saying_what_to_write() -> None:
    det = LocalEventDetector()
    det.explicit("order")
    det.rule("big", "order", action=lambda o: None)
    with RuleRecorder(det) as recorder:
        det.signal("order", amount=150)
    with pytest.raises(
        TypeError,
        match=r"assert_fired\('big', values=\.\.\.\): values\['amount'\] is 150, but .*"
        r"\(values=\{'amount': \(150,\)\}\); for one value, use params=\{'amount': 150\}",
    ):
        recorder.assert_fired("big", values={"amount": 150})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=r"values\['amount'\] is '150'"):
        recorder.assert_fired("big", values={"amount": "150"})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=r"params=\.\.\.\) takes a mapping"):
        recorder.assert_fired("big", params=[("amount", 150)])  # type: ignore[arg-type]
    recorder.assert_fired("big", values={"amount": [150]})  # a list is a sequence too
