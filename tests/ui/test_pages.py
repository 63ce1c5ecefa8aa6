"""What the console's pages show and what its actions do, over plain HTTP.

The listing's keyset pages, status filter and prefix search; a thread's state
at a step, the diff between two, its journal and lease; fork and delete with
their confirmation, and a delete refused while another process holds the run.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from urllib.parse import parse_qs, unquote_plus, urlsplit

from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.checkpoint.testing import make_checkpoint
from tests.cli.support import af, af_json
from tests.runtime.holders import hold
from tests.ui.support import (
    LOST_REPLY,
    RunningConsole,
    console,
    get,
    lost_reply,
    post,
    run_apart,
    store_path,
)

_LINK = re.compile(r'<a href="/thread\?id=([^"]*)">')
_NEXT = re.compile(r'<a href="(/\?[^"]*cursor=[^"]*)">next page</a>')


def _fill(cwd: Path) -> None:
    """60 finished threads ``a-000``... and 60 waiting for a human ``b-000``..."""

    async def run() -> None:
        async with SqliteCheckpointer(store_path(cwd)) as store:
            for i in range(60):
                await store.put(make_checkpoint(f"a-{i:03d}", 0))
                await store.put(make_checkpoint(f"b-{i:03d}", 0, next=("n",), interrupted=True))

    run_apart(run)


def _hold(cwd: Path, thread: str) -> None:
    """``worker-9`` takes ``thread``'s lease for a minute, as a live worker would."""

    async def run() -> None:
        async with SqliteCheckpointer(store_path(cwd)) as store:
            await hold(store, thread, "worker-9", lease_ms=60_000)

    run_apart(run)


def _threads(body: str) -> list[str]:
    return [unquote_plus(html.unescape(m)) for m in _LINK.findall(body)]


def _next(body: str) -> str | None:
    found = _NEXT.search(body)
    return html.unescape(found.group(1)) if found else None


def _pages(running: RunningConsole, path: str) -> list[list[str]]:
    pages: list[list[str]] = []
    next_path: str | None = path
    while next_path is not None:
        body = get(running, next_path).body
        pages.append(_threads(body))
        next_path = _next(body)
    return pages


def test_the_list_pages_by_keyset_filters_by_status_and_searches_by_prefix(
    tmp_path: Path,
) -> None:
    _fill(tmp_path)
    every = sorted([f"a-{i:03d}" for i in range(60)] + [f"b-{i:03d}" for i in range(60)])
    with console(tmp_path) as running:
        pages = _pages(running, "/?limit=50")
        assert [len(p) for p in pages] == [50, 50, 20]
        assert [t for p in pages for t in p] == every
        waiting = _pages(running, "/?status=interrupted&limit=25")
        assert [t for p in waiting for t in p] == [t for t in every if t.startswith("b-")]
        searched = get(running, "/?prefix=b-01&limit=50").body
        assert _threads(searched) == [f"b-{i:03d}" for i in range(10, 20)]
        assert "searched 100 threads" in searched  # two pages: the second ends past b-01
        # The search stops once the ids are past the prefix, however many follow.
        early = get(running, "/?prefix=a-00&limit=5").body
        assert _threads(early) == [f"a-00{i}" for i in range(5)] and _next(early) is not None
        scanned = int(re.search(r"searched (\d+) threads", early).group(1))  # type: ignore[union-attr]
        assert scanned == 5
        rest = _pages(running, _next(early) or "")
        assert [t for p in rest for t in p] == [f"a-00{i}" for i in range(5, 10)]
        done = _threads(get(running, "/?status=done&limit=100").body)
        assert done == [t for t in every if t.startswith("a-")]
        assert get(running, "/?status=bogus").status == 400
        assert get(running, "/?cursor=forged").status == 400


def test_a_thread_shows_its_state_at_any_step_a_diff_its_journal_and_its_lease(
    tmp_path: Path,
) -> None:
    af(tmp_path, "demo", "--thread", "t", "--approve", "--hold", "0")
    af(tmp_path, "demo", "--thread", "p", "--hold", "0")  # paused: a worker may claim it
    history = af_json(tmp_path, "history", "t")
    with console(tmp_path) as running:
        first = get(running, "/thread?id=t&step=0").body
        assert "state at step 0" in first and "A-1001" in first and "decision" not in first
        moved = post(running, "/diff?id=t", {"a": "0", "b": "7", "step": "3"})
        assert moved.status == 303
        assert parse_qs(urlsplit(moved.headers["location"]).query) == {
            "id": ["t"],
            "a": ["0"],
            "b": ["7"],
            "step": ["3"],
        }
        diff = get(running, moved.headers["location"]).body
        assert "diff 0 → 7" in diff and "<code>/decision</code></td><td>added" in diff
        assert "<code>/log</code></td><td>appended" in diff
        journal = diff[diff.index('id="journal"') :]
        refund = next(row for row in history if row["step"] == 6)
        assert "op_tool_cycle_" in journal and "succeeded" in journal
        assert refund["ts"] in journal  # when the step that recorded the call was written
        assert "unclaimed" in diff
        _hold(tmp_path, "p")
        held = get(running, "/thread?id=p").body
        assert "worker-9" in held and "(held)" in held


def test_fork_and_delete_from_the_console_ask_first_and_act_as_the_cli_does(
    tmp_path: Path,
) -> None:
    af(tmp_path, "demo", "--thread", "t", "--hold", "0")
    with console(tmp_path) as running:
        assert "fork at step 1" in get(running, "/thread?id=t&fork=1").body
        fork = "/act/fork?thread=t&step=1"
        asked = post(running, fork, {"to": "t-copy", "update": '{"note": "x"}'})
        assert asked.status == 200 and "t-copy" in asked.body
        assert "t-copy" not in af(tmp_path, "threads").stdout  # nothing before the confirmation
        bad = post(running, fork, {"to": "t-copy", "update": "[1]", "confirm": "yes"})
        assert bad.status == 400 and "--update must be a JSON object" in bad.body
        done = post(running, fork, {"to": "t-copy", "update": '{"note": "x"}', "confirm": "yes"})
        assert done.status == 303 and done.headers["location"].startswith("/thread?id=t-copy&")
        forked = af_json(tmp_path, "show", "t-copy")
        assert forked["state"]["note"] == "x" and forked["parent"] == "t:1"
        _hold(tmp_path, "t")
        refused = post(running, "/act/delete?thread=t", {"confirm": "yes"})
        assert refused.status == 409 and "held by worker-9" in refused.body
        assert "t" in [row["thread"] for row in af_json(tmp_path, "threads")["threads"]]
        deleted = post(running, "/act/delete?thread=t", {"confirm": "yes", "force": "yes"})
        assert deleted.status == 303 and deleted.headers["location"].startswith("/?note=")
        assert "deleted t" in get(running, deleted.headers["location"]).body
        assert [row["thread"] for row in af_json(tmp_path, "threads")["threads"]] == ["t-copy"]
        assert "deleted t" in running.output()


def test_an_answer_for_a_step_the_run_has_moved_past_is_refused(tmp_path: Path) -> None:
    af(tmp_path, "demo", "--thread", "t", "--hold", "0")
    with console(tmp_path) as running:
        af(tmp_path, "resume", "t", "--value", '"reject"')
        stale = post(running, "/act/resume?thread=t&step=2", {"value": '"approve"'})
        assert stale.status == 409 and "moved on to step" in stale.body
        bad = post(running, "/act/resume?thread=t&step=99", {"value": "approve"})
        assert bad.status == 409  # the step is checked first: the page was stale
    assert af_json(tmp_path, "show", "t")["state"]["decision"] == "reject"


def test_a_decision_names_the_attempt_it_settles(tmp_path: Path) -> None:
    lost_reply(tmp_path, "order-7")
    with console(tmp_path, *LOST_REPLY) as running:
        page = get(running, "/thread?id=order-7").body
        [action] = re.findall(r'action="(/act/reconcile\?[^"]*)"', page)
        query = parse_qs(urlsplit(html.unescape(action)).query)
        assert query["attempt"] == ["1"] and query["thread"] == ["order-7"]
        later = html.unescape(action).replace("attempt=1", "attempt=2")
        refused = post(running, later, {"decision": "retry", "confirm": "yes"})
        assert refused.status == 409 and "attempt" in refused.body
    status = af_json(tmp_path, "journal", "order-7")
    assert status["status"] == "reconciliation_required" and len(status["pending"]) == 1
