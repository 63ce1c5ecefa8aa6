"""Text from the store, made safe for a terminal and exact to paste back.

Whoever can write the store chooses thread ids, node names, questions and
state. Shown raw, an ``ESC[2J`` clears the operator's screen, an OSC-8
sequence plants a link, a bidi override reorders what they read. So every
character that does not print as itself (controls, format characters such
as bidi overrides and zero-width marks, line separators) is shown as a
``\\uXXXX`` escape: inert, visible, and valid inside JSON text. Rich markup
(``[bold red]``) and emoji codes are never interpreted: the command's console
has both off, and our own styles are attached to ``Text`` spans.

A command printed for the user to run again quotes each word for the shell;
a word with such characters uses bash's ``$'...'`` quoting, which names them
exactly, so the command still does what it says when pasted.
"""

from __future__ import annotations

import shlex

__all__ = ["inert", "shell_word"]


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def inert(text: str) -> str:
    """``text`` with every character that does not print as itself escaped."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _ansi_c(char: str) -> str:
    if char in "\\'":
        return "\\" + char
    if char.isprintable():
        return char
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return _escape(char)


def shell_word(word: str) -> str:
    """``word`` quoted for a POSIX shell, or for bash as ``$'...'`` when it holds
    characters a terminal would act on."""
    if word.isprintable():
        return shlex.quote(word)
    return "$'" + "".join(_ansi_c(c) for c in word) + "'"
