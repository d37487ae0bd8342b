"""Announcements read from stream files keep their values as the attributes'
types do: a NUMERIC(p, s) every digit, a BOOLEAN only what reads as one."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from sentinel.cli import main

PROGRAM = (
    "CREATE MUTABLE SUBSCRIBED EVENT CLASS A (k INT, n NUMERIC(30,10), r REAL, b BOOLEAN) "
    "ID (k) LIFESPAN(1d) ON ANNOUNCEMENT DO act(new.n, new.r, new.b);\n"
)
EXACT = "12345678901234567890.1234567891"


def _run(tmp_path: Path, name: str, text: str) -> tuple[int, str]:
    (tmp_path / "p.bicepl").write_text(PROGRAM)
    events = tmp_path / name
    events.write_text(text)
    result = CliRunner(env={"COLUMNS": "240"}).invoke(
        main,
        [
            "bicep", "run", str(tmp_path / "p.bicepl"), "--events", str(events),
            "--url", f"sqlite:///{tmp_path / (name + '.db')}",
        ],
    )  # fmt: skip
    return result.exit_code, result.output


def test_a_numeric_keeps_every_digit_from_csv_and_json(tmp_path: Path) -> None:
    """They went through float: 12345678901234567000.0000000000, even from a
    JSON string."""
    code, out = _run(
        tmp_path,
        "e.csv",
        f"class,k,n,r,b,occ,det\nA,1,{EXACT},0.5,yes,2014-04-07T08:02,2014-04-07T08:05\n",
    )
    assert code == 0, out
    assert f"act(Decimal('{EXACT}'), 0.5, True)" in out
    code, out = _run(
        tmp_path,
        "e.jsonl",
        f'{{"class":"A","k":2,"n":{EXACT},"r":0.25,"b":false,'
        '"occ":"2014-04-07T08:02","det":"2014-04-07T08:05"}\n'
        f'{{"class":"A","k":3,"n":"{EXACT}","r":"1.5","b":true,'
        '"occ":"2014-04-07T08:02","det":"2014-04-07T08:05"}\n',
    )
    assert code == 0, out
    assert f"act(Decimal('{EXACT}'), 0.25, False)" in out
    assert f"act(Decimal('{EXACT}'), 1.5, True)" in out


def test_a_value_that_is_not_of_the_attributes_type_names_the_attribute(tmp_path: Path) -> None:
    """A CSV 'maybe' for a BOOLEAN became False silently; 'lots' for a number
    was Python's float() message, naming no attribute."""
    code, out = _run(
        tmp_path,
        "b.csv",
        "class,k,n,r,b,occ,det\nA,1,1,1,maybe,2014-04-07T08:02,2014-04-07T08:05\n",
    )
    assert code == 1, out
    assert "b.csv:2: attribute b of A is boolean, not 'maybe'" in out
    code, out = _run(
        tmp_path,
        "n.jsonl",
        '{"class":"A","k":1,"n":"lots","occ":"2014-04-07T08:02","det":"2014-04-07T08:05"}\n',
    )
    assert code == 1, out
    assert "n.jsonl:1: attribute n of A is numeric, not 'lots'" in out
