"""Finding the code blocks of a Markdown document, and how each is to be run.

A fenced block's opening line names its language and may add words after
it: ``python``, ``bash``, ``sh`` and ``shell`` blocks are run; every other
language (``text``, ``json``, ``sql``, ``console``...) is only read. The word
``partial`` after the language (```` ```python partial ````, with an optional
reason after it) marks a fragment that cannot run on its own; the runner
skips exactly those blocks, and nothing else.

A Python block whose first line is a comment naming a file (``# dict_backend.py``)
is written under that name, so a later block of the same document can import it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PARTIAL", "Block", "blocks_of"]

#: The word that marks a block as a fragment, skipped by the runner.
PARTIAL = "partial"
PYTHON = {"python", "py"}
SHELL = {"bash", "sh", "shell"}
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)(?P<info>.*)$")
_FILE_NAME = re.compile(r"# (?P<name>[A-Za-z_][A-Za-z0-9_]*\.py)\n")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, and its code."""

    path: Path
    line: int  # of the opening fence, 1-based
    language: str
    words: tuple[str, ...]  # the info string's words after the language
    code: str

    @property
    def kind(self) -> str | None:
        """``"python"`` or ``"shell"`` for blocks that run, else None."""
        if self.language in PYTHON:
            return "python"
        if self.language in SHELL:
            return "shell"
        return None

    @property
    def partial(self) -> bool:
        """Marked a fragment: ``partial`` is the first word after the language."""
        return bool(self.words) and self.words[0].rstrip(":") == PARTIAL

    @property
    def file_name(self) -> str | None:
        """The file a Python block names on its first line (``# name.py``), if any."""
        named = _FILE_NAME.match(self.code) if self.kind == "python" else None
        return named["name"] if named else None

    @property
    def runs(self) -> bool:
        return self.kind is not None and not self.partial

    def __str__(self) -> str:
        return f"{self.path.name}:{self.line} ({self.language})"


def blocks_of(path: Path) -> list[Block]:
    """Every fenced block of ``path``, in order (indented fences included)."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        info = opening["info"].strip().split()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        language = info[0].lower() if info else ""
        found.append(Block(path, i + 1, language, tuple(info[1:]), "\n".join(body) + "\n"))
        i = j + 1
    return found
