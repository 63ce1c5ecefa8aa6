"""Log lines while a command runs: one line each on stderr, inert, and with
every form of the store URL's credential masked (a driver's warning may
quote the URL, or a traceback that does)."""

from __future__ import annotations

import logging
from urllib.parse import quote

import pytest

from agentflow.cli.logs import masked_logs

SECRET = "S3cr3t p@ss/w:rd%"
URLS = [
    f"postgresql://app:{quote(SECRET, safe='')}@db/agents",
    "redis://db:6379/0?password=Other-Pw-9",
]


def test_a_warning_quoting_the_url_is_one_masked_inert_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    log = logging.getLogger("some.driver")
    with masked_logs(URLS):
        log.warning("connection to %s lost (password %s)", URLS[0], SECRET)
        log.warning("retrying with Other-Pw-9 and \x1b[2Jcleared")
        try:
            raise ConnectionError(f"refused for {URLS[1]}")
        except ConnectionError:
            log.exception("pool broke")
        log.info("below WARNING: %s", SECRET)  # not shown at all
    err = capsys.readouterr().err
    for form in (SECRET, quote(SECRET, safe=""), "Other-Pw-9", "\x1b"):
        assert form not in err, form
    assert err.splitlines() == [
        "agentflow: warning: connection to postgresql://app:***@db/agents lost (password ***)",
        "agentflow: warning: retrying with *** and \\u001b[2Jcleared",
        "agentflow: error: pool broke (ConnectionError)",  # no traceback, which quotes the URL
    ]


def test_the_handler_is_gone_after_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    with masked_logs(URLS):
        pass
    logging.getLogger("some.driver").warning("after: %s", SECRET)
    assert "agentflow:" not in capsys.readouterr().err
