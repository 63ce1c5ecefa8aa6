"""The console's lock, request by request: the token, the cookie, the origin, the host.

Plain HTTP against a real ``agentflow ui`` process, so each test says exactly
what a request carries (a browser adds headers of its own; test_browser.py
covers what chromium does).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from agentflow.checkpoint.sealing import new_key
from agentflow.cli.parser import build_parser
from tests.backends.postgres import DSN
from tests.cli.support import af, af_json
from tests.ui.support import console, get, post, request

#: Every route of the console, and a path it does not have.
PATHS = ["/", "/thread?id=t", "/static/console.js", "/static/console.css", "/nowhere"]
#: An answer to ``t``'s approval, confirmed: it would resume the run.
ANSWER = {"value": '"approve"', "confirm": "yes"}
RESUME = "/act/resume?thread=t&step=2"


@pytest.fixture
def paused(tmp_path: Path) -> Path:
    """A directory whose default store holds ``t``, a demo waiting for its approval."""
    af(tmp_path, "demo", "--thread", "t", "--hold", "0")
    return tmp_path


def _still_paused(cwd: Path) -> None:
    assert af_json(cwd, "show", "t")["status"] == "interrupted"


def test_every_request_without_the_token_is_refused(paused: Path) -> None:
    with console(paused) as running:
        for cookie in [None, f"agentflow_console_1=wrong; other={running.token}"]:
            headers = {"Cookie": cookie} if cookie else {}
            for path in PATHS:
                answer = request(running, "GET", path, headers=headers)
                assert answer.status == 403, (path, cookie)
                assert "token" in answer.body and "Refund" not in answer.body
            answer = post(running, RESUME, ANSWER, cookie=cookie or "")
            assert answer.status == 403
        wrong = request(running, "GET", "/?token=" + "A" * len(running.token))
        assert wrong.status == 403 and "set-cookie" not in wrong.headers
    _still_paused(paused)


def test_the_token_becomes_an_httponly_strict_cookie_and_leaves_the_address(
    paused: Path,
) -> None:
    with console(paused) as running:
        answer = request(running, "GET", f"/thread?id=t&token={running.token}")
        assert answer.status == 303 and answer.headers["location"] == "/thread?id=t"
        port = urlsplit(running.base).port
        cookie = answer.headers["set-cookie"]
        assert cookie.startswith(f"agentflow_console_{port}={running.token};")
        attributes = {part.strip().lower() for part in cookie.split(";")[1:]}
        assert {"httponly", "samesite=strict", "path=/"} <= attributes
        elsewhere = request(running, "GET", f"//evil.example/x?token={running.token}")
        assert elsewhere.headers["location"] == "/evil.example/x"  # stays on the console
        page = get(running, "/thread?id=t")
        assert page.status == 200 and "Refund" in page.body
        assert running.token not in page.body  # nor on any page: the script cannot read it
        policy = page.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
        assert page.headers["cache-control"] == "no-store"


def test_a_write_needs_the_consoles_own_origin(paused: Path) -> None:
    with console(paused) as running:
        assert post(running, RESUME, ANSWER, origin=None).status == 403
        assert post(running, RESUME, ANSWER, origin="http://evil.example").status == 403
        assert post(running, RESUME, ANSWER, origin="null").status == 403
        other_port = f"http://127.0.0.1:{(urlsplit(running.base).port or 0) + 1}"
        assert post(running, RESUME, ANSWER, origin=other_port).status == 403
        _still_paused(paused)
        asked = post(running, RESUME, {"value": '"approve"'})
        assert asked.status == 200 and 'id="confirm"' in asked.body  # asks before it acts
        _still_paused(paused)
        done = post(running, RESUME, ANSWER)
        assert done.status == 303 and done.headers["location"].startswith("/thread?id=t&note=")
    assert af_json(paused, "show", "t")["status"] in ("waiting", "done")


def test_a_request_for_another_host_is_refused(paused: Path) -> None:
    """DNS rebinding: a site whose name resolves to 127.0.0.1 names itself in ``Host``."""
    with console(paused) as running:
        port = urlsplit(running.base).port
        for host in [f"evil.example:{port}", "127.0.0.1", f"127.0.0.1:{(port or 0) + 1}"]:
            headers = {"Host": host, "Cookie": running.cookie}
            assert request(running, "GET", "/", headers=headers).status == 403, host
        assert get(running, "/").status == 200
        localhost = {"Host": f"localhost:{port}", "Cookie": running.cookie}
        assert request(running, "GET", "/", headers=localhost).status == 200


def _listening(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp shows them) listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.rpartition(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


def test_the_console_listens_on_loopback_only_by_default(paused: Path) -> None:
    assert build_parser().parse_args(["ui"]).host == "127.0.0.1"
    with console(paused) as running:
        assert running.url.startswith("http://127.0.0.1:")
        first = next(line for line in running.lines if line.startswith("http"))
        assert first.strip() == running.url
        assert _listening(urlsplit(running.base).port or 0) == {"0100007F"}  # 127.0.0.1


def test_read_only_shows_everything_offers_no_action_and_accepts_no_write(paused: Path) -> None:
    with console(paused, "ui", "--read-only") as running:
        elsewhere = request(running, "GET", f"//evil.example/x?token={running.token}")
        assert elsewhere.headers["location"] == "/evil.example/x"  # stays on the console
        page = get(running, "/thread?id=t")
        assert page.status == 200 and "read-only" in page.body and "Refund" in page.body
        assert "/act/" not in page.body and "fork…" not in page.body
        for action in ["resume?thread=t&step=2", "delete?thread=t", "fork?thread=t&step=0"]:
            refused = post(running, f"/act/{action}", ANSWER | {"force": "yes"})
            assert refused.status == 403 and "read-only" in refused.body
        diff = post(running, "/diff?id=t", {"a": "0", "b": "2"})
        assert diff.status == 303  # reading is not writing
    _still_paused(paused)


@pytest.fixture
def postgres_url() -> Iterator[tuple[str, str]]:
    """A PostgreSQL store URL with a password in it, and a fresh namespace."""
    parts = urlsplit(DSN)
    netloc = f"{parts.username or 'postgres'}:pw-SECRET-31337@{parts.hostname}:{parts.port or 5432}"
    url = urlunsplit(parts._replace(netloc=netloc))
    namespace = f"ui-{uuid.uuid4().hex[:8]}"
    yield url, namespace


def test_no_sealing_key_and_no_url_password_reaches_a_page(
    tmp_path: Path, postgres_url: tuple[str, str]
) -> None:
    key = new_key()
    keys = json.dumps({"current": "k1", "keys": {"k1": key}, "retired": []})
    url, namespace = postgres_url
    store = ["--store", url, "--namespace", namespace]
    af(tmp_path, *store, "demo", "--thread", "t", "--hold", "0", AGENTFLOW_SEALING_KEYS=keys)
    try:
        with console(tmp_path, *store, extra_env={"AGENTFLOW_SEALING_KEYS": keys}) as running:
            pages = [get(running, path) for path in PATHS[:-1]]
            pages.append(get(running, "/thread?id=t&step=0&a=0&b=2"))
            pages.append(post(running, RESUME, {"value": '"approve"'}))
            pages.append(get(running, "/thread?id=missing"))
            assert [p.status for p in pages] == [200] * 6 + [404]
            assert "Refund" in pages[1].body  # read through the keys
            for shown in [*(p.body for p in pages), running.output()]:
                assert key not in shown and "pw-SECRET-31337" not in shown
    finally:
        af(tmp_path, *store, "delete", "t", "--force", check=False, AGENTFLOW_SEALING_KEYS=keys)


def test_the_console_without_its_extra_names_the_install(paused: Path) -> None:
    """``agentflow ui`` where Starlette is not installed: one line saying what to install."""
    blocked = paused / "blocked" / "starlette"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'starlette'\", name='starlette')\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = af(paused, "ui", "--port", "0", check=False, PYTHONPATH=f"{blocked.parent}:{root}")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr == (
        "agentflow: error: the console needs the ui extra (starlette is missing): "
        "pip install 'agentflow-durable[ui]'\n"
    )
