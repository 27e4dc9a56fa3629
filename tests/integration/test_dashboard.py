"""`opsdctl serve` in a real headless Chromium (Debian's chromium + chromium-driver, via Selenium):
on a store filled by real chains (the emulator stages), every page renders without a console
error (a screenshot of each lands in the test's tmp dir), the compare page shows the numbers of
`compare --json` and the session page the bet of `status --json`, every `?format=json` is the CLI's `--json`, a chain that finishes while the page
is open appears without a reload; and the server refuses what it must (no token off loopback, a
store it would have to write), never writing the store."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO, Workspace, clean_env, default_config, opsdctl_argv, stop_process, wait_for

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
try:
    import selenium  # noqa: F401
except ImportError:
    selenium = None
if not (CHROMIUM and DRIVER and selenium):
    if os.environ.get("CI") == "true":  # CI installs them (.ci/run): there, a missing browser is a failure
        raise RuntimeError("CI=true but chromium, chromium-driver or selenium is missing; .ci/run installs them")
    pytest.skip("no headless browser here: apt-get install chromium chromium-driver (and pip install -e '.[dev]' "
                "for selenium) to run the dashboard's browser tests", allow_module_level=True)

TOKEN = "t0ken-for-the-dashboard-tests"
PAGES = {"session": "/", "compare": "/compare", "variant": "/variant/token-clip", "chain": "/chain/1",
         "escaped": "/variant/xss"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, headers: dict | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def start_server(ws: Workspace, *extra: str, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([*opsdctl_argv(), "serve", "--port", str(port), *extra], cwd=ws.root,
                            env=clean_env({**ws.env, **(env or {})}), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    base = f"http://127.0.0.1:{port}"

    def up():
        if proc.poll() is not None:
            raise AssertionError(f"serve exited {proc.returncode}: {proc.stdout.read()}")
        try:
            return get(base + "/changes", {"Authorization": f"Bearer {TOKEN}"})[0] == 200
        except OSError:
            return False

    wait_for(up, timeout=60, what="opsdctl serve to answer")
    return proc, base


def store_dump(db: Path) -> list[str]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return list(con.iterdump())
    finally:
        con.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("dash") / "ws"
    root.mkdir()
    shutil.copytree(REPO / "recipes", root / "recipes")
    ws = Workspace(root)
    ws.write_config(default_config(budget="hours = 6"))
    ws.cli("queue", "baseline", "-n", "2")
    ws.cli("queue", "token-clip", "-n", "2")
    ws.run("worker", "--drain", env={"FAKE_STEPS": "3"}, timeout=180)
    ws.cli("queue", "cosine")  # waits for the live-update test's worker
    # text from the store is escaped: a description that would run script if it were not
    ws.recipe("xss", 'name = "xss"\nextends = "baseline"\n'
                     'description = "<img src=/nope onerror=\\"document.title=\'owned\'\\"><script>document.title=\'owned\'</script>"\n')
    ws.cli("queue", "xss")
    ws.cli("cancel", "6")
    proc, base = start_server(ws, env={"OPSDCTL_SERVE_TOKEN": TOKEN})
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1000"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must never download a browser or driver
    browser = webdriver.Chrome(options=opts, service=Service(DRIVER))
    browser.set_page_load_timeout(60)
    browser.get(f"{base}/?token={TOKEN}")  # the token once; the cookie it sets carries it from now on
    try:
        yield ws, base, browser, root.parent
    finally:
        browser.quit()
        stop_process(proc)


def console_errors(browser) -> list[dict]:
    return [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def test_every_page_renders_without_console_errors(site):
    ws, base, browser, tmp = site
    before = store_dump(ws.db)
    for name, path in PAGES.items():
        browser.get(base + path)
        assert browser.title.startswith("opsdctl · "), browser.page_source[:500]
        assert browser.find_element("id", "live").text.strip() and "owned" not in browser.title
        assert console_errors(browser) == [], name
        assert browser.save_screenshot(str(tmp / f"{name}.png"))
        assert (tmp / f"{name}.png").stat().st_size > 5000
    assert store_dump(ws.db) == before  # it read, it never wrote


def test_compare_page_shows_the_numbers_of_compare_json(site):
    ws, base, browser, _ = site
    doc = json.loads(ws.run("compare", "--json").stdout)
    browser.get(base + "/compare")
    rows = {r.get_attribute("data-name"): r for r in browser.find_elements("css selector", "#compare tr[data-name]")}
    full = [e for e in doc["variants"] if not e["partial"]]
    assert sorted(rows) == sorted(e["name"] for e in full) and full
    for e in full:
        cell = lambda cls: rows[e["name"]].find_element("css selector", f"td.{cls}").text
        assert cell("mean") == f"{e['mean']:.2f}"
        assert cell("delta") == (f"{e['delta']:+.2f}" if e["delta"] is not None else "-")
        assert cell("pbeat") == (f"{e['p_beat']:.3f}" if e["p_beat"] is not None else "-")


def test_session_page_shows_the_bet_of_status_json(site):
    ws, base, browser, _ = site
    bet = json.loads(ws.run("status", "--json").stdout)["bet"]
    assert bet and bet["forecast"]["mean"] is not None  # the worker kept it current
    browser.get(base + "/")
    text = browser.find_element("id", "bet").text
    f = bet["forecast"]
    assert text.startswith(bet["leader"]) and f"{f['mean']:.2f}" in text
    assert f"[{f['low80']:.2f}, {f['high80']:.2f}]" in text and f"P(best) {f['p_best']:.2f}" in text


def test_every_json_twin_is_the_clis_json(site):
    ws, base, _, _ = site
    auth = {"Authorization": f"Bearer {TOKEN}"}
    cli = {"compare": ["compare"], "variant": ["show", "token-clip"], "chain": ["chain", "1"]}
    for name, args in cli.items():
        code, text = get(base + PAGES[name] + "?format=json", auth)
        page, want = json.loads(text), json.loads(ws.run(*args, "--json").stdout)
        if name == "compare":  # the budget's clock moves between the two reads
            page["budget"].pop("minutes_left", None), want["budget"].pop("minutes_left", None)
        assert code == 200 and page == want, name
    shown = ws.run("chain", "1", "--lines", "2").stdout  # the same document, as the terminal shows it
    chain = json.loads(ws.run("chain", "1", "--json").stdout)
    assert shown.startswith("chain 1 baseline seed 0: succeeded") and f"score {chain['score']:.2f}" in shown
    assert chain["log_tail"]["lines"][-1] in shown  # the log's last line ends both
    code, text = get(base + "/?format=json", auth)
    page, want = json.loads(text), json.loads(ws.run("status", "--json").stdout)
    assert sorted(page) == sorted(want)
    strip = lambda doc: [{k: c[k] for k in ("chain_id", "variant", "state", "score", "stage")} for c in doc["chains"]]
    assert strip(page) == strip(want)


def test_a_chain_that_finishes_appears_without_a_reload(site):
    ws, base, browser, tmp = site
    browser.get(base + "/")
    browser.execute_script("window.__same_page = 'yes';")
    assert "cosine" not in browser.find_element("id", "finished").text
    ws.run("worker", "--drain", env={"FAKE_STEPS": "4"}, timeout=120)

    def finished_text() -> str:
        # the page swaps its content in place: an element found just before a swap is stale by the
        # time its text is read, and the next poll finds the new one
        from selenium.common.exceptions import StaleElementReferenceException

        try:
            return browser.find_element("id", "finished").text
        except StaleElementReferenceException:
            return ""

    wait_for(lambda: "cosine" in finished_text(), timeout=30, what="the finished chain to appear on the open page")
    assert browser.execute_script("return window.__same_page") == "yes"  # swapped in place, not reloaded
    assert console_errors(browser) == []
    browser.save_screenshot(str(tmp / "session-after.png"))


def test_token_and_loopback_rules(site):
    ws, base, _, _ = site
    assert get(base + "/")[0] == 401
    assert get(base + "/?format=json&token=wrong-token-of-enough-length")[0] == 401
    assert get(base + f"/?format=json&token={TOKEN}")[0] == 200
    out = ws.run("serve", "--host", "0.0.0.0", "--port", str(free_port()), check=False, timeout=60)
    assert out.returncode == 2 and "not a loopback address" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    out = ws.run("serve", "--token", "short", check=False, timeout=60)
    assert out.returncode == 2 and "too guessable" in out.stderr
    plain, url = start_server(ws)  # no token: loopback only, and only loopback names (no DNS rebinding)
    try:
        assert get(url + "/?format=json")[0] == 200
        assert get(url + "/?format=json", {"Host": "attacker.example"})[0] == 400
    finally:
        stop_process(plain)


def test_serve_never_creates_or_upgrades_a_store(tmp_path):
    ws = Workspace(tmp_path)
    ws.write_config(default_config())
    out = ws.run("serve", "--port", str(free_port()), check=False, timeout=60)
    assert out.returncode == 2 and "no store there yet" in out.stderr
    assert not ws.db.exists()
    from store_fill import store_at_base

    store_at_base(ws.db)
    before = store_dump(ws.db)
    out = ws.run("serve", "--port", str(free_port()), check=False, timeout=60)
    assert out.returncode == 2 and "serve never writes the store" in out.stderr
    assert store_dump(ws.db) == before


def test_a_database_password_is_never_shown(tmp_path):
    ws = Workspace(tmp_path)
    ws.write_config(default_config().replace('db = "sqlite:///runs.db"',
                                             'db = "postgresql://lab:s3cretpw@127.0.0.1:1/runs?connect_timeout=2"'))
    out = ws.run("serve", "--port", str(free_port()), check=False, timeout=60)
    assert out.returncode == 2 and "postgresql://lab:***@127.0.0.1:1/runs" in out.stderr, out.stderr
    assert "s3cretpw" not in out.stdout + out.stderr
