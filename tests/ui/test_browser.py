"""The console in a real browser: an operator's paths through it, end to end.

Each test starts ``agentflow ui`` over a SQLite file store, drives chromium
through the pages as an operator would (links, forms, the confirmation),
and checks the outcome with the command line (``agentflow show --json``),
another process reading the same store.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Locator, Page, expect

from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.cli.text import inert
from tests.cli import hostile
from tests.cli.support import af, af_json
from tests.runtime.graphs import ledger_lines
from tests.ui.support import LOST_REPLY, console, lost_reply, run_apart, store_path

Shot = Callable[[Page, str], Path]
#: What the live script may take to show a change (it polls every 2 s).
LIVE_MS = 12_000
#: A thread id that is markup, script, a bidi override and a line break.
HOSTILE_ID = (
    '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
    "[bold]x[/] bidi\u202etxt.exe line\nbreak"
)


def _hostile_question(cwd: Path) -> None:
    async def run() -> None:
        async with SqliteCheckpointer(store_path(cwd)) as store:
            result = (
                await hostile.graph()
                .compile(store)
                .run({"question": hostile.COMBINED}, thread=HOSTILE_ID)
            )
            assert result.status == "interrupted"

    run_apart(run)


def _status(page: Page) -> Locator:
    """The thread page's section, whose ``data-status`` is the thread's status."""
    return page.locator("section[data-status]")


def _confirm(page: Page, title: str) -> None:
    expect(page.locator("h1")).to_have_text(title)
    page.locator("#confirm button").click()


def test_an_operator_answers_an_interrupt_from_the_list_to_done(
    tmp_path: Path, page: Page, shot: Shot
) -> None:
    af(tmp_path, "demo", "--thread", "refund-A-1001", "--hold", "0")
    af(tmp_path, "demo", "--thread", "refund-A-1002", "--order", "A-1002", "--approve")
    with console(tmp_path) as running:
        page.goto(running.url)
        assert page.url == f"{running.base}/"  # the token left the address bar
        row = page.locator("#threads tr", has_text="refund-A-1001")
        expect(row).to_contain_text("interrupted")
        shot(page, "threads")
        row.get_by_role("link").click()
        expect(page.locator("h1")).to_have_text("refund-A-1001")
        expect(page.locator("#timeline")).to_contain_text("request_approval asks: Refund")
        shot(page, "thread")
        page.fill("input[name=value]", '"approve"')
        page.get_by_role("button", name="Resume").click()
        expect(page.locator(".confirm")).to_contain_text('"approve"')
        shot(page, "confirm")
        _confirm(page, "Resume refund-A-1001")
        expect(page.locator("[role=status]")).to_contain_text("resumed")
        expect(_status(page)).to_have_attribute("data-status", "done", timeout=LIVE_MS)
        expect(page.locator("#journal")).to_contain_text("refund")
        expect(page.locator("#journal")).to_contain_text("idem")  # the idempotency key
        shot(page, "done")
        assert "resumed refund-A-1001 -> waiting" in running.output()
    shown = af_json(tmp_path, "show", "refund-A-1001")
    assert shown["status"] == "done" and shown["state"]["decision"] == "approve"


def test_an_operator_settles_an_ambiguous_call_and_the_run_is_charged_once(
    tmp_path: Path, page: Page, shot: Shot
) -> None:
    ledger = lost_reply(tmp_path, "order-7")
    with console(tmp_path, *LOST_REPLY) as running:
        page.goto(running.url)
        page.select_option("select[name=status]", "reconciliation_required")
        page.get_by_role("button", name="Filter").click()
        page.get_by_role("link", name="order-7").click()
        expect(_status(page)).to_have_attribute("data-status", "reconciliation_required")
        expect(page.locator("#journal")).to_contain_text("ambiguous")
        expect(page.locator("form.decide")).to_contain_text("unknown_tool_side_effect")
        shot(page, "reconcile")
        page.select_option("select[name=decision]", "replay_success")
        page.fill("input[name=receipt]", '{"charged": 700}')
        page.get_by_role("button", name="Record decision").click()
        expect(page.locator(".confirm")).to_contain_text("replay_success")
        _confirm(page, "Settle a call of order-7")
        expect(page.locator("[role=status]")).to_contain_text("recorded replay_success")
        page.locator("#resume button").click()
        _confirm(page, "Resume order-7")
        expect(_status(page)).to_have_attribute("data-status", "done", timeout=LIVE_MS)
        assert "recorded replay_success for op_tool_" in running.output()
    shown = af_json(tmp_path, "show", "order-7")
    assert shown["state"]["receipt"] == {"charged": 700}
    assert len(ledger_lines(str(ledger))) == 1  # the lost reply's charge, and no second one


def test_a_browser_without_the_token_is_refused(tmp_path: Path, page: Page) -> None:
    af(tmp_path, "demo", "--thread", "t", "--hold", "0")
    with console(tmp_path) as running:
        for path in ["/", "/thread?id=t", "/static/console.js", f"/?token={'x' * 43}"]:
            answer = page.goto(running.base + path)
            assert answer is not None and answer.status == 403, path
            expect(page.locator("body")).to_contain_text("token")
        assert "Refund" not in page.content()


def test_a_hostile_thread_id_stays_inert(tmp_path: Path, page: Page) -> None:
    _hostile_question(tmp_path)
    shown = inert(HOSTILE_ID)
    with console(tmp_path, "--graph", "tests.cli.hostile:graph") as running:
        page.goto(running.url)
        link = page.locator("#threads a")
        expect(link).to_have_text(shown)  # the characters themselves, the escapes visible
        assert "\\u202e" in shown and "\\u000a" in shown
        for where in ("the list", "the thread page"):
            assert page.locator("main img, main script").count() == 0, where
            assert page.evaluate("window.__pwned") is None, where
            if where == "the list":
                link.click()
        expect(page.locator("h1")).to_have_text(shown)
        expect(page.locator("dl.summary")).to_contain_text("[bold red]markup[/]")
        # The id travels back exactly: answering acts on this very thread.
        page.fill("input[name=value]", '"no"')
        page.get_by_role("button", name="Resume").click()
        page.locator("#confirm button").click()
        expect(_status(page)).to_have_attribute("data-status", "done", timeout=LIVE_MS)
        assert page.evaluate("window.__pwned") is None


def test_a_change_made_from_the_command_line_shows_up_without_a_reload(
    tmp_path: Path, page: Page
) -> None:
    af(tmp_path, "demo", "--thread", "live-1", "--hold", "0")
    with console(tmp_path) as running:
        page.goto(running.url)
        row = page.locator("#threads tr", has_text="live-1")
        expect(row).to_contain_text("interrupted")
        page.evaluate("window.__same_page = true")
        af(tmp_path, "resume", "live-1", "--value", '"reject"')
        expect(row).to_contain_text("done", timeout=LIVE_MS)
        assert page.evaluate("window.__same_page") is True  # refreshed in place
        row.get_by_role("link").click()
        expect(_status(page)).to_have_attribute("data-status", "done")
        page.evaluate("window.__same_page = true")
        af(tmp_path, "delete", "live-1")
        expect(page.locator("[role=alert]")).to_contain_text("not found", timeout=LIVE_MS)
        assert page.evaluate("window.__same_page") is True  # refreshed in place
