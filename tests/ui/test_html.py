"""The page builder: store text is only ever text, and ids travel back exactly."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from agentflow.ui.html import Html, el, json_block, url

HOSTILE = '"><script>alert(1)</script>\u202e\x1b[2J'


def test_text_is_escaped_and_made_inert_and_markup_is_ours_only() -> None:
    cell = el("td", HOSTILE, Html("<b>ours</b>"), 7, None, [HOSTILE])
    assert "<script>" not in cell and cell.count("&lt;script&gt;") == 2
    assert "\u202e" not in cell and "\\u202e" in cell and "\x1b" not in cell
    assert "<b>ours</b>" in cell and "<td>" in cell and ">7" in cell


def test_attribute_values_cannot_close_their_quotes() -> None:
    link = el("a", "x", href=HOSTILE, data_note="a&b", hidden=True, title=None, open=False)
    assert link.startswith('<a href="&quot;&gt;&lt;script&gt;')
    assert ' data-note="a&amp;b"' in link and " hidden" in link
    assert "title" not in link and "open" not in link
    assert el("input", name="value", class_="wide") == '<input name="value" class="wide">'


def test_a_json_block_cannot_end_its_pre() -> None:
    block = json_block({"note": "</pre><script>x</script>", "bidi": "\u202e"})
    assert block.count("</pre>") == 1 and "<script>" not in block
    assert "\\u202e" in block


def test_an_id_in_a_url_carries_every_character_exactly() -> None:
    thread = "a/b?c=d&e#f\r\nline\u202e%20"
    address = url("/act/resume", thread=thread, step=3, operation=None)
    assert "\n" not in address and "\r" not in address and "operation" not in address
    assert parse_qs(urlsplit(address).query) == {"thread": [thread], "step": ["3"]}
