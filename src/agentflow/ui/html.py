"""HTML built so that store text can only ever be text.

Whoever can write the store chooses thread ids, questions, state and journal
payloads. A page is assembled from :class:`Html` (markup this package wrote)
and plain ``str`` (anything else), and a plain ``str`` is always escaped on
the way in: ``<script>`` in a thread id arrives as the characters ``<script>``.
Text shown to the operator also goes through the command line's
:func:`~agentflow.cli.text.inert`, so a bidi override or a zero-width mark
shows as ``\\u202e`` instead of reordering or hiding what is read. Values
that travel back to the server (thread ids, operation ids) go in URLs,
percent-encoded, which carry every character exactly, where a form field's
value would have its line breaks normalized by the browser.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlencode

import orjson

from agentflow.cli.render import dump_json, inert_json
from agentflow.cli.text import inert

__all__ = ["Child", "Html", "el", "json_block", "link", "one_line", "page", "text", "url"]


class Html(str):
    """Markup written by this package: joined as it is, never escaped again."""

    __slots__ = ()


#: What an element may contain: markup, text (escaped), numbers, nothing, or a sequence.
Child = Html | str | int | None | Iterable["Child"]


def text(value: object) -> Html:
    """``value`` as text the browser shows as itself, escaped and inert."""
    return Html(html.escape(inert(str(value)), quote=True))


def _children(children: Iterable[Child]) -> Iterable[str]:
    for child in children:
        if child is None:
            continue
        if isinstance(child, Html):
            yield child
        elif isinstance(child, str | int):
            yield text(child)
        else:
            yield from _children(child)


def _attributes(attrs: dict[str, Any]) -> str:
    """``class_`` becomes ``class`` and ``data_x`` ``data-x``; True is a bare
    attribute, None and False leave it out. Values are escaped, not made inert:
    an attribute is read by the browser, not by the operator."""
    parts: list[str] = []
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        name = key.rstrip("_").replace("_", "-")
        parts.append(f" {name}" if value is True else f' {name}="{html.escape(str(value))}"')
    return "".join(parts)


_VOID = frozenset({"input", "meta", "link", "br", "hr", "img"})


def el(tag: str, /, *children: Child, **attrs: Any) -> Html:
    """The element ``<tag attrs>children</tag>``; ``str`` children are text."""
    opening = f"<{tag}{_attributes(attrs)}>"
    if tag in _VOID:
        return Html(opening)
    return Html(f"{opening}{''.join(_children(children))}</{tag}>")


def url(path: str, **query: str | int | None) -> str:
    """``path`` with ``query`` percent-encoded (None values left out)."""
    given = {key: str(value) for key, value in query.items() if value is not None}
    return f"{path}?{urlencode(given)}" if given else path


def link(label: Child, path: str, **query: str | int | None) -> Html:
    return el("a", label, href=url(path, **query))


def json_block(value: Any) -> Html:
    """``value`` as indented JSON in a ``<pre>``, inert (C1 and format characters escaped)."""
    try:
        shown = inert_json(dump_json(value))
    except TypeError:  # not JSON (a store never returns such): shown, not raised
        shown = inert(repr(value))
    return el("pre", Html(html.escape(shown, quote=True)), class_="json")


def one_line(value: Any, width: int = 80) -> str:
    """``value`` as one line of JSON, cut to ``width``, for a table cell."""
    shown = orjson.dumps(value, default=repr).decode()
    return shown if len(shown) <= width else shown[: width - 1] + "…"


def page(title: str, body: Html, *, header: Html, etag: str | None) -> Html:
    """A whole page: the shipped stylesheet and script, no inline script or
    style (the Content-Security-Policy forbids both). A page with the
    ``etag`` of its ``body`` is refreshed in place by the script
    (``static/console.js``) whenever the server's ``body`` differs."""
    head = el(
        "head",
        el("meta", charset="utf-8"),
        el("meta", name="viewport", content="width=device-width, initial-scale=1"),
        el("title", title),
        el("link", rel="stylesheet", href="/static/console.css"),
        el("script", src="/static/console.js", defer=True),
    )
    main = el("main", body, id="live", data_live="1" if etag else None, data_etag=etag)
    return Html("<!doctype html>\n" + el("html", head, el("body", header, main), lang="en"))
