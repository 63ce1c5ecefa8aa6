"""Log records while a command runs: one line each on stderr, inert, no credential.

A driver or the sealing key ring may log a warning that quotes a store URL
(or a message derived from one). While a command runs, every record of
WARNING and above reaches stderr through one handler that masks each
credential of the command's store URLs (:func:`~agentflow.checkpoint.stores.without_passwords`)
and escapes what a terminal would act on, as every other line the command prints.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from agentflow.checkpoint.stores import without_passwords
from agentflow.cli.text import inert

__all__ = ["masked_logs"]


class _Masked(logging.Filter):
    """Rewrites each record's message with the credentials of ``urls`` masked."""

    def __init__(self, urls: Sequence[str]) -> None:
        super().__init__()
        self._urls = list(urls)

    def filter(self, record: logging.LogRecord) -> bool:
        message = without_passwords(record.getMessage(), self._urls)
        record.msg = f"{record.levelname.lower()}: {inert(message)}"
        record.args = None
        if record.exc_info is not None:  # a traceback may quote the URL: one line instead
            exc = record.exc_info[1]
            record.msg += f" ({type(exc).__name__})" if exc is not None else ""
            record.exc_info = None
            record.exc_text = None
        return True


@contextmanager
def masked_logs(urls: Sequence[str]) -> Iterator[None]:
    """While the block runs, log records of WARNING and above go to stderr as
    one masked, inert line each (instead of Python's last-resort handler)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("agentflow: %(message)s"))
    handler.addFilter(_Masked(urls))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
