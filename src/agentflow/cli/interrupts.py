"""Ctrl-C ends any command at once, saying what was done and what continues it.

While a command runs, the first Ctrl-C cancels it (the event loop's SIGINT
handler cancels the command's task, so cleanup in ``finally`` blocks still
runs); a third one stops it even if something swallowed the cancellation.
A prompt reads its answer with Python's own SIGINT handler, so a Ctrl-C
there ends the command instead of being echoed as ``^C`` (the loop's handler
would only run once the blocking read returned).

A command says what an interrupt leaves behind in its :class:`Continuation`:
the counts so far (``copy``, ``rekey``) and the exact commands that continue
the work. A command on one run names the thread instead, and its continue
commands are read from the store at the interrupt (a run paused at a question
is continued by answering it, one waiting on a timer by ``resume --wait``).
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from agentflow.cli.text import shell_word

__all__ = [
    "Continuation",
    "PromptInput",
    "answer_or_none",
    "interrupt_at_once",
    "repeated_command",
]

#: Ctrl-C presses after which the command stops even if its task ignored the cancellation.
_HARD_STOP = 3


@dataclass
class Continuation:
    """What Ctrl-C reports: ``counts()`` (what was done so far) and ``commands``
    (pasteable, they continue the work); ``thread``: the run the command drives."""

    commands: list[str] = field(default_factory=list)
    counts: Callable[[], str] | None = None
    thread: str | None = None
    interrupted: bool = False
    presses: int = 0
    #: A Ctrl-C a prompt has already acted on, which the event loop will see again.
    seen_by_prompt: bool = False

    def summary(self) -> str:
        """``interrupted``, with the counts when the command keeps any."""
        counts = self.counts() if self.counts is not None else ""
        return f"interrupted ({counts})" if counts else "interrupted"


@contextlib.contextmanager
def interrupt_at_once(continuation: Continuation) -> Iterator[None]:
    """While the block runs (in a task, on the main thread), Ctrl-C cancels that task."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()

    def on_sigint() -> None:
        if continuation.seen_by_prompt:  # the loop's late view of the prompt's Ctrl-C
            continuation.seen_by_prompt = False
            return
        continuation.interrupted = True
        continuation.presses += 1
        if continuation.presses >= _HARD_STOP:
            raise KeyboardInterrupt
        if task is not None:
            task.cancel()

    try:
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    except (RuntimeError, ValueError):  # not the main thread: Python's KeyboardInterrupt stays
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)


class PromptInput:
    """Standard input for a prompt, read a line at a time, waiting for it in
    short ``select`` calls. A Ctrl-C's SIGINT may be delivered to any thread
    (a store's worker thread, say): a main thread blocked in ``read`` would
    never see it, and the prompt would wait for Enter. Between waits the main
    thread runs Python again, so the signal's handler runs there at once."""

    def __init__(self, stream: TextIO | None = None, tick: float = 0.05) -> None:
        self._stream = stream if stream is not None else sys.stdin
        self._tick = tick

    def readline(self) -> str:
        """The next line (with its newline); EOFError at the end of input (Ctrl-D)."""
        with contextlib.suppress(OSError, ValueError):  # no descriptor: read as it comes
            descriptor = self._stream.fileno()
            while not select.select([descriptor], [], [], self._tick)[0]:
                pass
        line = self._stream.readline()
        if not line:
            raise EOFError
        return line


def answer_or_none(ask: Callable[[], str], continuation: Continuation) -> str | None:
    """``ask()`` (a blocking prompt) with Ctrl-C ending the command at once; None
    when the input ends (Ctrl-D: no answer now)."""
    try:
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:  # not the main thread
        previous = None
    try:
        return ask()
    except EOFError:
        return None
    except KeyboardInterrupt:
        continuation.interrupted = True
        continuation.presses += 1
        continuation.seen_by_prompt = previous is not None
        raise asyncio.CancelledError from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def repeated_command(argv: Sequence[str], hidden: dict[str, str]) -> str:
    """``agentflow`` with ``argv`` again, quoted for the shell; a word in ``hidden``
    (a URL with a password, as itself or after ``--flag=``) is replaced by the
    shell variable named there."""
    words = ["agentflow"]
    for word in argv:
        flag, equals, value = word.partition("=")
        if word in hidden:
            words.append(f'"${hidden[word]}"')
        elif equals and flag.startswith("--") and value in hidden:
            words.append(f'{flag}="${hidden[value]}"')
        else:
            words.append(shell_word(word))
    return " ".join(words)
