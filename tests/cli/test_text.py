"""Every code point that does not show as itself is escaped, in every rendered id, key and value."""

from __future__ import annotations

import asyncio
import json
import sys
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest

from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.cli.render import dump_json, inert_json
from agentflow.cli.text import INVISIBLE, inert, shell_word, shows_as_itself

#: Code points that Python calls printable but that render as nothing (or as
#: another character's decoration), so that several ids would look alike.
LOOKALIKES = {
    "U+FE0F variation selector-16": "\ufe0f",
    "U+E0100 variation selector-17": "\U000e0100",
    "U+034F combining grapheme joiner": "\u034f",
    "U+3164 Hangul filler": "\u3164",
    "U+115F Hangul choseong filler": "\u115f",
    "U+1160 Hangul jungseong filler": "\u1160",
    "U+FFA0 halfwidth Hangul filler": "\uffa0",
    "U+180B Mongolian free variation selector": "\u180b",
    "U+17B4 Khmer vowel inherent aq": "\u17b4",
    "U+1D173 musical symbol begin beam": "\U0001d173",
    "U+E0041 tag latin capital a": "\U000e0041",
}
#: Invisible for other reasons: format characters, bidi controls, private use, unassigned.
OTHERS = {
    "U+200B zero width space": "\u200b",
    "U+200D zero width joiner": "\u200d",
    "U+202E right-to-left override": "\u202e",
    "U+2066 left-to-right isolate": "\u2066",
    "U+FEFF byte order mark": "\ufeff",
    "U+00AD soft hyphen": "\u00ad",
    "U+0600 Arabic number sign": "\u0600",
    "U+E000 private use": "\ue000",
    "U+0378 unassigned": "\u0378",
    "U+2028 line separator": "\u2028",
    "U+0085 next line": "\x85",
}


@pytest.mark.parametrize(
    "char", [*LOOKALIKES.values(), *OTHERS.values()], ids=[*LOOKALIKES, *OTHERS]
)
def test_an_invisible_code_point_is_escaped(char: str) -> None:
    shown = inert(f"order-1{char}")
    assert shown != "order-1" and char not in shown
    assert shown == f"order-1\\u{ord(char):04x}" or shown == f"order-1\\U{ord(char):08x}"
    assert char not in shell_word(f"order-1{char}")


@pytest.mark.parametrize(
    "char", [*LOOKALIKES.values(), *OTHERS.values()], ids=[*LOOKALIKES, *OTHERS]
)
def test_escaped_json_is_still_json_of_the_same_value(char: str) -> None:
    """In ``--json`` output an escape is JSON's (``\\U`` is none: a code point
    above U+FFFF is a surrogate pair), so a script reads back the exact id."""
    value = {f"key{char}": [f"order-1{char}", {"n": 1}]}
    shown = inert_json(dump_json(value))
    assert char not in shown and "\\U" not in shown
    assert json.loads(shown) == value


def test_seven_ids_that_look_alike_are_told_apart() -> None:
    ids = ["order-1", *(f"order-1{c}" for c in list(LOOKALIKES.values())[:6])]
    assert len({inert(thread) for thread in ids}) == 7


def test_every_default_ignorable_code_point_is_escaped() -> None:
    for start, end in INVISIBLE:
        for code in range(start, min(end, start + 300) + 1):
            assert not shows_as_itself(chr(code)), f"U+{code:04X}"


@pytest.mark.parametrize("text", ["order-1", "Ünïcödé", "スレッド", "emoji-👩", "مرحبا", "a b"])
def test_visible_text_is_shown_as_it_is(text: str) -> None:
    assert inert(text) == text
    assert all(shows_as_itself(c) for c in text)


def test_the_table_matches_this_pythons_unicode_data() -> None:
    """A format character this Python knows is escaped whether or not it is in the table."""
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        if unicodedata.category(char) == "Cf":
            assert not shows_as_itself(char), f"U+{code:04X}"


async def _alike(db: Path, ids: list[str]) -> None:
    async with SqliteCheckpointer(db) as store:
        for thread in ids:
            for step in (0, 1):
                await store.put(make_checkpoint(thread, step, state={f"k{thread}": step}))


def test_json_output_names_each_lookalike_id_exactly(
    here: Callable[..., tuple[int, str]], tmp_path: Path
) -> None:
    ids = ["order-1", *(f"order-1{c}" for c in LOOKALIKES.values())]
    asyncio.run(_alike(tmp_path / ".runs" / "checkpoints.db", ids))
    status, out = here("threads", "--json")
    assert status == 0 and sorted(t["thread"] for t in json.loads(out)["threads"]) == sorted(ids)
    for thread in ids:
        shown = json.loads(here("show", thread, "--json")[1])
        assert (shown["thread"], shown["state"]) == (thread, {f"k{thread}": 1})
        changes = json.loads(here("diff", thread, "0", "1", "--json")[1])["changes"]
        assert [c["path"] for c in changes] == [f"/k{thread}"]
        assert {r["thread"] for r in json.loads(here("history", thread, "--json")[1])} == {thread}
