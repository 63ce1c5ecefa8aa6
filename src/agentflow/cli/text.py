"""Text from the store, made safe for a terminal and exact to paste back.

Whoever can write the store chooses thread ids, node names, questions and
state. Shown raw, an ``ESC[2J`` clears the operator's screen, an OSC-8
sequence plants a link, a bidi override reorders what they read, and a
variation selector or a Hangul filler makes two different ids look the same.
So every character that does not show as itself (controls, format characters
such as bidi overrides and zero-width marks, line separators, Unicode's
default-ignorable code points, private-use and unassigned ones) is shown as
a ``\\uXXXX`` escape: inert, visible, and valid inside JSON text. Rich markup
(``[bold red]``) and emoji codes are never interpreted: the command's console
has both off, and our own styles are attached to ``Text`` spans.

A command printed for the user to run again quotes each word for the shell;
a word with such characters uses bash's ``$'...'`` quoting, which names them
exactly, so the command still does what it says when pasted.
"""

from __future__ import annotations

import shlex
import unicodedata
from bisect import bisect_right
from typing import Final

__all__ = ["INVISIBLE", "inert", "inert_json_text", "shell_word", "shows_as_itself"]

#: Unicode's Default_Ignorable_Code_Point ranges (DerivedCoreProperties.txt, 15.1):
#: code points a renderer may draw as nothing, although Python calls several of
#: them printable (variation selectors, the Hangul fillers, U+034F, U+180B...).
INVISIBLE: Final = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)
_STARTS: Final = [start for start, _ in INVISIBLE]
#: Categories that never show as themselves: format, surrogate, private use, unassigned.
_HIDDEN_CATEGORIES: Final = frozenset({"Cf", "Cs", "Co", "Cn"})


def _ignorable(code: int) -> bool:
    index = bisect_right(_STARTS, code) - 1
    return index >= 0 and code <= INVISIBLE[index][1]


def shows_as_itself(char: str) -> bool:
    """Whether ``char`` is drawn as a visible mark of its own: printable, not a
    default-ignorable code point, not a format, private-use or unassigned one."""
    if not char.isprintable():
        return False
    if char.isascii():
        return True
    return not _ignorable(ord(char)) and unicodedata.category(char) not in _HIDDEN_CATEGORIES


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _json_escape(char: str) -> str:
    """``char`` as JSON escapes it: ``\\uXXXX``, a pair of them (UTF-16
    surrogates) above U+FFFF, where ``\\U`` is no JSON escape."""
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def inert(text: str) -> str:
    """``text`` with every character that does not show as itself escaped."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(c if shows_as_itself(c) else _escape(c) for c in text)


def inert_json_text(line: str) -> str:
    """A ``line`` of JSON text with every character that does not show as
    itself escaped as JSON escapes it, so it is still JSON of the same value
    (such characters stand only inside strings there, where ``\\uXXXX``
    means the character)."""
    if line.isascii() and line.isprintable():
        return line
    return "".join(c if shows_as_itself(c) else _json_escape(c) for c in line)


def _ansi_c(char: str) -> str:
    if char in "\\'":
        return "\\" + char
    if shows_as_itself(char):
        return char
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return _escape(char)


def shell_word(word: str) -> str:
    """``word`` quoted for a POSIX shell, or for bash as ``$'...'`` when it holds
    characters a terminal would act on."""
    if all(shows_as_itself(c) for c in word):
        return shlex.quote(word)
    return "$'" + "".join(_ansi_c(c) for c in word) + "'"
