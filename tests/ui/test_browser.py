"""``sentinel ui`` in a real browser: Debian's headless Chromium, driven by
Selenium through Debian's chromedriver (nothing is downloaded). The pages
load, the graph is drawn and its nodes answer clicks, a firing's why-tree
opens, the filters work, a hostile value stays text, and a new firing shows
up without a reload. A screenshot of each page is kept under pytest's
temporary directory (and, with ``SENTINEL_UI_SHOTS=dir``, written there too:
that is how ``docs/ui/`` was made).

Skipped, saying why, where ``/usr/bin/chromium`` or ``/usr/bin/chromedriver``
is missing (``apt-get install chromium chromium-driver``; ``.ci/run`` does)."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

pytest.importorskip("starlette", reason="sentinel ui needs the ui extra")
pytest.importorskip("selenium", reason="the browser tests drive Chromium with selenium")

import uvicorn
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from sentinel.log import Firing, LogWriter
from sentinel.log.tables import log_tables
from sentinel.ui import create_app

from .conftest import HOSTILE, N_FIRINGS, build_log, shop_rules

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The view of a log of its own (a test adds a firing), served by uvicorn
    on a free loopback port: ``(base URL, database URL)``."""
    yield from _serve(tmp_path_factory, None)


TOKEN = "browser-test-token-0123456789"


@pytest.fixture(scope="module")
def served_acting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """As :func:`served`, with ``--allow-actions`` and :data:`TOKEN`."""
    yield from _serve(tmp_path_factory, TOKEN)


def _serve(
    tmp_path_factory: pytest.TempPathFactory, token: str | None
) -> Iterator[tuple[str, str]]:
    url = f"sqlite:///{tmp_path_factory.mktemp('browser') / 'app.db'}"
    engine = sa.create_engine(url)
    build_log(engine)
    engine.dispose()
    port = _free_port()
    app = create_app(url, detector=shop_rules(), allowed_hosts=["127.0.0.1"], actions_token=token)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", url
    server.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip(
            "the browser tests need Debian's chromium and chromium-driver "
            "(/usr/bin/chromium, /usr/bin/chromedriver): apt-get install chromium chromium-driver"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(arg)
    options.add_argument("--disable-dev-shm-usage")
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(20)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


def shoot(browser: Any, shots: Path, name: str) -> None:
    """Keep a screenshot of the page (whole height) as ``name.png``."""
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1400, max(700, min(int(height) + 40, 1200)))
    browser.save_screenshot(str(shots / f"{name}.png"))
    browser.set_window_size(1400, 1000)
    extra = os.environ.get("SENTINEL_UI_SHOTS")
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        shutil.copy(shots / f"{name}.png", Path(extra) / f"{name}.png")


def no_alert(browser: Any) -> None:
    try:
        _ = browser.switch_to.alert
    except NoAlertPresentException:
        return
    raise AssertionError("a script from the log ran: an alert is open")


def test_rules_page_draws_the_graph_and_nodes_answer_clicks(
    served: tuple[str, str], browser: Any, shots: Path
) -> None:
    base, _ = served
    browser.get(base + "/rules")
    assert browser.title == "Rules · sentinel"
    graph = browser.find_element(By.ID, "graph")
    assert graph.size["width"] > 200 and graph.size["height"] > 150
    nodes = browser.find_elements(By.CSS_SELECTOR, "#graph .node")
    assert len(nodes) >= 10
    box = nodes[0].find_element(By.TAG_NAME, "rect")
    assert box.size["width"] > 20  # drawn, not just present
    seq = browser.find_element(By.CSS_SELECTOR, '#graph .node[data-text="order ; pay"]')
    seq.click()
    assert browser.find_element(By.CSS_SELECTOR, "#node-text .text").text == "order ; pay"
    assert browser.find_element(By.CSS_SELECTOR, "#node-text .lang").text.lower() == "snoop"
    hostile = browser.find_element(By.CSS_SELECTOR, "#graph .node.rule")
    assert any(HOSTILE in n.text for n in browser.find_elements(By.CSS_SELECTOR, "#rules .name"))
    hostile.click()
    no_alert(browser)
    shoot(browser, shots, "rules")


def test_firings_filter_and_a_firing_opens_its_why_tree(
    served: tuple[str, str], browser: Any, shots: Path
) -> None:
    base, _ = served
    browser.get(base + "/firings")
    assert browser.title == "Firings · sentinel"
    rows = browser.find_elements(By.CSS_SELECTOR, "#firings tbody tr")
    assert len(rows) == 50
    assert rows[0].find_element(By.CSS_SELECTOR, ".name").text == HOSTILE
    no_alert(browser)
    shoot(browser, shots, "firings")
    form = browser.find_element(By.ID, "firing-filters")
    form.find_element(By.NAME, "rule").send_keys("paid")
    form.find_element(By.CSS_SELECTOR, "select[name=status] option[value=failed]").click()
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    WebDriverWait(browser, 10).until(lambda b: "status=failed" in b.current_url)
    names = {e.text for e in browser.find_elements(By.CSS_SELECTOR, "#firings .name")}
    statuses = [
        r.find_elements(By.TAG_NAME, "td")[3].text
        for r in browser.find_elements(By.CSS_SELECTOR, "#firings tbody tr")
    ]
    assert names == {"paid"} and set(statuses) == {"failed"} and len(statuses) == 9
    browser.find_element(By.CSS_SELECTOR, "#firings .firing-link").click()
    WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.ID, "why"))
    items = browser.find_elements(By.CSS_SELECTOR, "#why .occurrence")
    assert [i.find_element(By.CLASS_NAME, "event").text for i in items] == ["order", "pay"]
    assert "scope tx-56" in items[0].text
    shoot(browser, shots, "firing")


def test_firings_filter_by_scope(served: tuple[str, str], browser: Any) -> None:
    base, _ = served
    browser.get(base + "/firings")
    form = browser.find_element(By.ID, "firing-filters")
    form.find_element(By.NAME, "scope").send_keys("tx-10")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    WebDriverWait(browser, 10).until(lambda b: "scope=tx-10" in b.current_url)
    links = browser.find_elements(By.CSS_SELECTOR, "#firings .firing-link")
    assert [a.text for a in links] == ["#11"]


def test_firings_filter_by_partition_key(served: tuple[str, str], browser: Any) -> None:
    base, _ = served
    browser.get(base + "/firings")
    form = browser.find_element(By.ID, "firing-filters")
    form.find_element(By.NAME, "key").send_keys('"3"')  # the string key only
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    WebDriverWait(browser, 10).until(lambda b: "key=%223%22" in b.current_url)
    links = browser.find_elements(By.CSS_SELECTOR, "#firings .firing-link")
    assert [a.text for a in links] == ["#59", "#54"]
    keys = browser.find_elements(By.CSS_SELECTOR, "#firings td.key a")
    assert [k.text for k in keys] == ['["3"]', '["3"]']
    keys[0].click()  # a key links to its firings
    WebDriverWait(browser, 10).until(lambda b: "key=%5B%223%22%5D" in b.current_url)
    links = browser.find_elements(By.CSS_SELECTOR, "#firings .firing-link")
    assert [a.text for a in links] == ["#59", "#54"]


def test_a_hostile_value_stays_text_in_the_why_tree(
    served: tuple[str, str], browser: Any, shots: Path
) -> None:
    base, _ = served
    browser.get(f"{base}/firings/{N_FIRINGS + 1}")
    no_alert(browser)
    assert browser.find_element(By.CSS_SELECTOR, "h1 .name").text == HOSTILE
    params = browser.find_element(By.CSS_SELECTOR, "#why .params").text
    assert params == '{"note":"' + HOSTILE + '"}'
    # the page's only script is its own file
    scripts = browser.execute_script(
        "return Array.from(document.scripts).map(s => s.getAttribute('src'))"
    )
    assert scripts == ["/static/ui.js"]


def test_outbox_and_log_pages_load(served: tuple[str, str], browser: Any, shots: Path) -> None:
    base, _ = served
    browser.get(base + "/outbox")
    assert browser.title == "Outbox · sentinel"
    assert browser.find_element(By.CSS_SELECTOR, "#cursors .name").text == "main"
    failed = browser.find_element(By.ID, "outbox-failed").text
    assert f"KeyError: {HOSTILE}" in failed
    no_alert(browser)
    shoot(browser, shots, "outbox")
    browser.get(base + "/log?limit=5")
    assert browser.title == "Log · sentinel"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#log section.txn")) == 5
    no_alert(browser)
    shoot(browser, shots, "log")
    browser.find_element(By.ID, "older").click()
    WebDriverWait(browser, 10).until(lambda b: "before=" in b.current_url)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#log section.txn")) == 5


def test_a_new_firing_is_announced_without_a_reload(served: tuple[str, str], browser: Any) -> None:
    base, url = served
    browser.get(base + "/firings")
    banner = browser.find_element(By.ID, "new-firings")
    time.sleep(0.3)
    assert not banner.is_displayed()
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        LogWriter().write(
            conn,
            firings=[
                Firing(
                    rule="paid",
                    scope="tx-new",
                    t_occ=1,
                    constituents=(("tx-new", 1),),
                    coupling="immediate",
                    status="fired",
                    fired_at=datetime.now(UTC),
                )
            ],
        )
    engine.dispose()
    WebDriverWait(browser, 10).until(lambda b: banner.is_displayed())


def test_an_unlocked_browser_retries_a_failed_entry(
    served_acting: tuple[str, str], browser: Any, shots: Path
) -> None:
    """The whole path in Chromium: its own Origin, the CSRF cookie and field,
    the token typed once into the page."""
    base, url = served_acting
    browser.delete_all_cookies()
    browser.get(base + "/outbox")
    retry = browser.find_element(By.CSS_SELECTOR, "#outbox-failed form.retry button")
    assert not retry.is_enabled()  # locked
    browser.find_element(By.CSS_SELECTOR, "#unlock input[name=token]").send_keys(TOKEN)
    browser.find_element(By.CSS_SELECTOR, "#unlock button").click()
    WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.ID, "unlocked"))
    shoot(browser, shots, "outbox-actions")
    browser.find_element(By.CSS_SELECTOR, "#outbox-failed form.retry button").click()
    WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.ID, "retried"))
    assert "pending again" in browser.find_element(By.ID, "retried").text
    assert "none" in browser.find_element(By.ID, "outbox-failed").text
    no_alert(browser)
    o = log_tables().outbox
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        status = conn.execute(
            sa.select(o.c.status).where(o.c.idempotency_key == "k-failed")
        ).scalar()
    engine.dispose()
    assert status == "pending"


def test_a_wrong_token_unlocks_nothing(served_acting: tuple[str, str], browser: Any) -> None:
    base, _ = served_acting
    browser.delete_all_cookies()
    browser.get(base + "/firings")
    browser.find_element(By.CSS_SELECTOR, "#unlock input[name=token]").send_keys("x" * 20)
    browser.find_element(By.CSS_SELECTOR, "#unlock button").click()
    WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.ID, "error"))
    assert "refused" in browser.find_element(By.ID, "error").text
    browser.get(base + "/outbox")
    assert not browser.find_elements(By.ID, "unlocked")


def test_an_unlocked_browser_disables_a_rule_of_the_global_detector(
    served_acting: tuple[str, str], browser: Any, shots: Path
) -> None:
    """The switch in Chromium: the Disable button is locked until the token
    is typed; then it writes a request the Rules page shows as pending."""
    base, url = served_acting
    browser.delete_all_cookies()
    browser.get(base + "/rules")
    switch = browser.find_element(By.CSS_SELECTOR, "#rules form.switch button")
    assert not switch.is_enabled() and switch.text == "Disable"  # locked
    browser.find_element(By.CSS_SELECTOR, "#unlock input[name=token]").send_keys(TOKEN)
    browser.find_element(By.CSS_SELECTOR, "#unlock button").click()
    WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.ID, "unlocked"))
    browser.find_element(By.CSS_SELECTOR, "#rules form.switch button").click()
    WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.ID, "switched"))
    assert "(disable pending)" in browser.find_element(By.ID, "rules").text
    assert "pending" in browser.find_element(By.ID, "switches").text
    shoot(browser, shots, "rules-actions")
    no_alert(browser)
    t = log_tables().rule_switches
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        asked = conn.execute(sa.select(t.c.rule, t.c.enabled, t.c.position)).all()
    engine.dispose()
    assert [tuple(a) for a in asked] == [("paid", False, None)]
