"""Documents a reader follows in one directory do not write over each other's files.

Each document's blocks run in a scratch directory of their own, but a reader
runs several in one clone: a key spec written with ``>`` by two documents
(cli.md and sealing.md both wrote ``keys.json``) makes the first one's sealed
store unreadable. So no file a shell block writes with a redirection is
written by another document.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from tests.docs.blocks import blocks_of
from tests.docs.test_examples import DOCUMENTS, ROOT

#: ``> FILE`` or ``>> FILE`` (not ``2>&1``, not ``> /dev/null``, not ``> "$VAR"``).
_WRITES = re.compile(r"(?<![-=0-9&>])>>?[ \t]*(?!&)['\"]?(?P<file>[A-Za-z0-9_.][\w./-]*)")


def _written(path: Path) -> set[str]:
    return {
        match["file"]
        for block in blocks_of(path)
        if block.kind == "shell"
        for match in _WRITES.finditer(block.code)
    }


def test_no_two_documents_write_the_same_file() -> None:
    writers: dict[str, list[str]] = defaultdict(list)
    for document in DOCUMENTS:
        for name in _written(document):
            writers[name].append(document.relative_to(ROOT).as_posix())
    shared = {name: docs for name, docs in writers.items() if len(docs) > 1}
    assert not shared, shared


def test_the_pattern_sees_the_redirections_a_block_makes() -> None:
    code = 'python - > keys.json\necho x >> .runs/log.txt 2>&1\ncmd > /dev/null\necho "$A" > "$B"\n'
    assert {m["file"] for m in _WRITES.finditer(code)} == {"keys.json", ".runs/log.txt"}
