"""The ``sentinel ui`` command: its options, and the application it serves."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

pytest.importorskip("starlette", reason="sentinel ui needs the ui extra")
from starlette.testclient import TestClient

from sentinel.cli import main


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """What the server was started with (the application, the address of the
    socket the command bound), instead of serving. Afterwards the
    application's life ends as a server's would (its shutdown disposes of the
    engine the command made), also for a test that never opened it."""
    got: dict[str, Any] = {}

    def run(server: Any, sockets: list[Any] | None = None) -> None:
        assert sockets is not None and len(sockets) == 1
        got["app"] = server.config.app
        got["host"], got["port"] = sockets[0].getsockname()[:2]
        sockets[0].close()

    monkeypatch.setattr("uvicorn.Server.run", run)
    yield got
    if "app" in got:
        with TestClient(got["app"]):
            pass


def test_serves_the_log_with_its_rules_on_the_loopback(
    log_url: str, served: dict[str, Any]
) -> None:
    result = CliRunner().invoke(
        main, ["ui", "--url", log_url, "--rules", "tests.ui.conftest:shop_rules", "--port", "0"]
    )
    assert result.exit_code == 0, result.output
    host, port = served["host"], served["port"]
    assert host == "127.0.0.1" and port > 0  # --port 0: a free port, shown as bound
    assert f"sentinel ui on http://127.0.0.1:{port}/ " in result.output
    with TestClient(served["app"], base_url=f"http://127.0.0.1:{port}") as c:
        assert "shipped" in c.get("/rules").text
        # only requests addressed to the loopback (DNS rebinding)
        assert c.get("/rules", headers={"host": "attacker.example"}).status_code == 400


def test_another_interface_is_served_with_a_warning(log_url: str, served: dict[str, Any]) -> None:
    result = CliRunner().invoke(main, ["ui", "--url", log_url, "--host", "0.0.0.0"])
    assert result.exit_code == 0, result.output
    assert "anyone who can reach it reads the log" in result.output
    assert served["host"] == "0.0.0.0"


def test_read_only_unless_actions_are_allowed(log_url: str, served: dict[str, Any]) -> None:
    result = CliRunner().invoke(main, ["ui", "--url", log_url])
    assert result.exit_code == 0 and "token" not in result.output
    assert served["app"].state.guard is None


def test_allow_actions_prints_a_fresh_token(log_url: str, served: dict[str, Any]) -> None:
    result = CliRunner().invoke(
        main, ["ui", "--url", log_url, "--allow-actions"], env={"SENTINEL_UI_TOKEN": None}
    )
    assert result.exit_code == 0, result.output
    found = re.search(r"giving the token (\S+)", result.output)
    assert found is not None and len(found.group(1)) >= 16
    assert served["app"].state.guard.token_given(_Bare(), {"token": found.group(1)})


def test_allow_actions_takes_the_token_from_the_environment(
    log_url: str, served: dict[str, Any]
) -> None:
    token = "from-the-environment-0123"
    result = CliRunner().invoke(
        main, ["ui", "--url", log_url, "--allow-actions"], env={"SENTINEL_UI_TOKEN": token}
    )
    assert result.exit_code == 0, result.output
    assert token not in result.output and "SENTINEL_UI_TOKEN" in result.output
    assert served["app"].state.guard.token_given(_Bare(), {"token": token})
    short = CliRunner().invoke(
        main, ["ui", "--url", log_url, "--allow-actions"], env={"SENTINEL_UI_TOKEN": "short"}
    )
    assert short.exit_code == 2 and "at least 16 characters" in short.output


class _Bare:
    """A request with no cookie and no header."""

    cookies: dict[str, str] = {}
    headers: dict[str, str] = {}


def test_a_database_without_the_log_is_one_line(tmp_path: Any, served: dict[str, Any]) -> None:
    result = CliRunner().invoke(main, ["ui", "--url", f"sqlite:///{tmp_path / 'none.db'}"])
    assert result.exit_code == 1
    assert "Error:" in result.output and "Traceback" not in result.output
    assert "app" not in served


def test_an_ipv6_address_is_shown_in_brackets(log_url: str, served: dict[str, Any]) -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    try:
        socket.socket(socket.AF_INET6).bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    result = CliRunner().invoke(main, ["ui", "--url", log_url, "--host", "::1", "--port", "0"])
    assert result.exit_code == 0, result.output
    assert f"sentinel ui on http://[::1]:{served['port']}/" in result.output


def test_a_port_in_use_is_one_line_before_anything_is_shown(
    log_url: str, served: dict[str, Any]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(main, ["ui", "--url", log_url, "--port", str(port)])
    assert result.exit_code == 1, result.output
    assert f"Error: cannot serve on 127.0.0.1 port {port}: Address already in use" in result.output
    assert "sentinel ui on" not in result.output
    assert "app" not in served


@pytest.mark.parametrize("host", ["::1", "127.0.0.1"])
def test_an_ipv6_loopback_host_header_is_answered(
    log_url: str, served: dict[str, Any], host: str
) -> None:
    """Served on ``--host ::1``, every request was refused (400 "Invalid host
    header"): a browser sends ``Host: [::1]:PORT``, and Starlette compares
    the host with its brackets."""
    if host == "::1":
        try:
            socket.socket(socket.AF_INET6).bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback here")
    result = CliRunner().invoke(main, ["ui", "--url", log_url, "--host", host, "--port", "0"])
    assert result.exit_code == 0, result.output
    port = served["port"]
    with TestClient(served["app"], base_url=f"http://[::1]:{port}") as c:
        r = c.get("/firings", headers={"host": f"[::1]:{port}"})
        assert r.status_code == 200 and "Rule firings" in r.text
        assert c.get("/firings", headers={"host": f"[::2]:{port}"}).status_code == 400
