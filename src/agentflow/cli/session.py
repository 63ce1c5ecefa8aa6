"""What every subcommand works with: the store it names, the terminal, and the
follow-up commands it prints.

:func:`open_cli_store` is the one place the command line opens a store: one
object holding a thread's checkpoints, durable record and events, opened
once per command from ``--store`` and ``--namespace``.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit

import orjson
from rich.console import Console
from rich.text import Text

from agentflow.checkpoint import open_store
from agentflow.checkpoint.codec import CheckpointCodec
from agentflow.checkpoint.store import Store
from agentflow.checkpoint.stores import (
    DEFAULT_STORE,
    has_password,
    local_path,
    safe_url,
    server_hosts,
    without_passwords,
)
from agentflow.cli import render
from agentflow.cli.drive import continue_commands
from agentflow.cli.errors import UsageError
from agentflow.cli.interrupts import Continuation
from agentflow.cli.keys import store_codec
from agentflow.cli.registry import GraphRegistry, graph_specs_from_env
from agentflow.cli.text import inert, shell_word
from agentflow.errors import InvalidStoreUrl, StoreNotFound
from agentflow.runtime import RunResult

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing

__all__ = [
    "STORE_ENV",
    "CliConsole",
    "Session",
    "StoreTarget",
    "command_line",
    "open_cli_store",
]

STORE_ENV = "AGENTFLOW_STORE"
NAMESPACE_ENV = "AGENTFLOW_NAMESPACE"
#: How long a command waits to find a server before saying it cannot.
CONNECT_TIMEOUT_S = 5
_MONGODB_TIMEOUTS = {
    "serverSelectionTimeoutMS": str(CONNECT_TIMEOUT_S * 1000),
    "connectTimeoutMS": str(CONNECT_TIMEOUT_S * 1000),
}
_REDIS_TIMEOUTS = {"socket_connect_timeout": str(CONNECT_TIMEOUT_S)}
#: libpq's name, which the PostgreSQL backend hands to asyncpg.
_POSTGRES_TIMEOUTS = {"connect_timeout": str(CONNECT_TIMEOUT_S)}
#: URL options, by scheme, that bound how long finding the server may take.
_TIMEOUT_OPTIONS = {
    "postgresql": _POSTGRES_TIMEOUTS,
    "postgres": _POSTGRES_TIMEOUTS,
    "mongodb": _MONGODB_TIMEOUTS,
    "mongodb+srv": _MONGODB_TIMEOUTS,
    "redis": _REDIS_TIMEOUTS,
    "rediss": _REDIS_TIMEOUTS,
}


#: How long an interrupted command may spend reading where its run stopped.
_INTERRUPT_READ_S = 3.0


class CliConsole(Console):
    """The command's console: store text printed as text (markup, emoji codes and
    highlighting off), and a reader that closed the pipe (``| head``) ends the
    command quietly (rich would exit with status 1)."""

    def __init__(self, *, stderr: bool = False) -> None:
        super().__init__(stderr=stderr, markup=False, emoji=False, highlight=False)

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


@dataclass(frozen=True)
class StoreTarget:
    """A store URL and namespace, and whether each came from a flag."""

    url: str
    namespace: str | None
    url_from_flag: bool = False
    namespace_from_flag: bool = False

    @classmethod
    def from_args(cls, store: str | None, namespace: str | None) -> StoreTarget:
        """From ``--store``/``--namespace`` (None: not given), else the environment."""
        if namespace == "":
            raise UsageError("--namespace must not be empty; omit it for the default namespace")
        return cls(
            url=store if store is not None else os.environ.get(STORE_ENV) or DEFAULT_STORE,
            namespace=namespace if namespace is not None else os.environ.get(NAMESPACE_ENV) or None,
            url_from_flag=store is not None,
            namespace_from_flag=namespace is not None,
        )

    @property
    def scheme(self) -> str:
        return self.url.split("://", 1)[0].lower() if "://" in self.url else ""

    @property
    def safe(self) -> str:
        """The URL without its credentials (:func:`~agentflow.checkpoint.stores.safe_url`)."""
        return safe_url(self.url)

    def mask(self, text: str) -> str:
        """``text`` with every credential of the store URL masked, in any form."""
        return without_passwords(text, [self.url])

    @property
    def where(self) -> str:
        """Where the store is, without credentials: a path or ``host:port``."""
        path = local_path(self.url)
        return str(path) if path is not None else server_hosts(self.url)

    def flag_words(self) -> list[str]:
        """The flags a printed follow-up command must repeat, shell-quoted.

        A URL with a password is never printed, masked or not (a masked one
        would not run): the command reads it from ``$AGENTFLOW_STORE``.
        """
        words: list[str] = []
        if self.url_from_flag:
            store = HIDDEN_STORE if has_password(self.url) else shell_word(self.url)
            words += ["--store", store]
        if self.namespace_from_flag and self.namespace is not None:
            words += ["--namespace", shell_word(self.namespace)]
        return words


def _with_timeouts(url: str, scheme: str) -> str:
    """``url`` with short connection timeouts, unless it sets its own. The
    options are appended to the URL as written (a host-less
    ``postgresql:///db?host=...`` keeps its ``//``)."""
    options = _TIMEOUT_OPTIONS.get(scheme)
    if not options:
        return url
    base, hash_, fragment = url.partition("#")
    given = {key.lower() for key, _ in parse_qsl(urlsplit(base).query, keep_blank_values=True)}
    missing = urlencode([(k, v) for k, v in options.items() if k.lower() not in given])
    if not missing:
        return url
    joined = f"{base}{'&' if '?' in base else '?'}{missing}"
    return joined + hash_ + fragment


def open_cli_store(
    target: StoreTarget,
    *,
    create: bool,
    sealing: KeyRing | None,
    codec: CheckpointCodec | None = None,
) -> Store:
    """Open ``target`` for a command, sealed with the command's keys (``sealing``;
    without keys a sealed record is refused naming where the keys go; ``codec``
    replaces both, as ``rekey`` needs); ``create=False`` refuses a missing store.

    Commands that only read (and those that need an existing thread) pass
    ``create=False``: pointed at a path, database, key prefix or collection
    with no store, they say so instead of creating an empty store there. A
    local path is checked here, before anything opens; a server store is
    refused by its backend on the first call.
    """
    path = local_path(target.url)
    if path is not None and not create and not path.exists():
        raise StoreNotFound(f"no store at {inert(str(path))} ({inert(target.safe)})")
    opened = open_store(
        _with_timeouts(target.url, target.scheme),
        namespace=target.namespace,
        codec=codec or (None if sealing is not None else store_codec(None)),
        sealing=None if codec is not None else sealing,
        create=create,
    )
    if not isinstance(opened, Store):
        raise InvalidStoreUrl(
            f"{inert(target.safe)} opens a {type(opened).__name__}, which keeps no durable "
            "records or events: the command line works on agentflow stores"
        )
    return opened


#: How a printed command names a store URL that carries a credential.
HIDDEN_STORE: Final = f'"${STORE_ENV}"'
#: The shell variables a printed command names instead of a URL with a password,
#: and which URL each stands for.
HIDDEN_URLS: Final = {
    STORE_ENV: "the URL you passed as --store",
    "SRC_URL": "copy's source URL",
    "DST_URL": "copy's destination URL",
}


def hidden_store_note(text: str) -> str:
    """The note that follows a printed command naming a variable instead of a
    store URL (it has a password), or "" when ``text`` names none."""
    named = [f"{name} to {what}" for name, what in HIDDEN_URLS.items() if f'"${name}"' in text]
    if not named:
        return ""
    return (
        "(a store URL with a password is not printed: set "
        + " and ".join(named)
        + " before pasting)"
    )


def command_line(args: Any, target: StoreTarget, *words: str) -> str:
    """A pasteable ``agentflow ...`` command: ``words`` are quoted here, and the
    store, namespace and ``--graph`` flags given to this command are repeated."""
    prefix = ["agentflow", *target.flag_words()]
    for spec in getattr(args, "graph", []):
        prefix += ["--graph", shell_word(spec)]
    return " ".join([*prefix, *(shell_word(w) for w in words)])


@dataclass
class Session:
    """What every subcommand needs: parsed flags, the store, the terminal."""

    args: Any
    store: Store
    console: Console
    target: StoreTarget
    #: What Ctrl-C reports (see :mod:`agentflow.cli.interrupts`).
    continuation: Continuation = field(default_factory=Continuation)

    @property
    def json(self) -> bool:
        return bool(getattr(self.args, "json", False))

    @cached_property
    def graph_specs(self) -> list[str]:
        return [*graph_specs_from_env(), *getattr(self.args, "graph", [])]

    @cached_property
    def registry(self) -> GraphRegistry:
        return GraphRegistry(self.store, self.graph_specs)

    def command(self, *words: str) -> str:
        """A pasteable ``agentflow ...`` command on this session's store."""
        return command_line(self.args, self.target, *words)

    async def note_interrupt(self) -> None:
        """On Ctrl-C, find the commands that continue the run this command
        drives (``continuation.thread``) in the store, as it is now."""
        c = self.continuation
        if c.thread is None or c.commands:
            return
        try:
            latest = await asyncio.wait_for(self.store.get(c.thread), _INTERRUPT_READ_S)
        except Exception:  # the store may be what was cut short: the plain resume stands
            latest = None
        if latest is not None and latest.done:
            c.commands = [self.command("show", c.thread)]
        elif latest is not None and latest.interrupted:
            c.commands = continue_commands(RunResult(latest), self.command)
        else:
            c.commands = [self.command("resume", c.thread)]

    def say(self, *parts: str | tuple[str, str]) -> None:
        """Print one line: plain strings are shown inert; ``(text, style)``
        pairs are our own words in a style. Never wrapped, so it pastes back;
        the store's credentials are masked, and a command that names
        ``$AGENTFLOW_STORE`` instead of the URL is followed by the note that says so."""
        line = Text.assemble(
            *(
                self.target.mask(inert(p)) if isinstance(p, str) else (self.target.mask(p[0]), p[1])
                for p in parts
            )
        )
        self.console.print(line, soft_wrap=True)
        self._note_hidden(line.plain)

    def print_commands(self, lines: list[str], *, heading: str = "continue with:") -> None:
        """Print commands the user may paste, one per line, never wrapped."""
        self.console.print(heading, soft_wrap=True)
        for line in lines:
            self.console.print(Text(f"  {self.target.mask(line)}"), soft_wrap=True)
        self._note_hidden("\n".join(lines))

    def _note_hidden(self, text: str) -> None:
        note = hidden_store_note(text)
        if note:
            self.console.print(f"  {note}", soft_wrap=True)

    def write(self, text: str) -> None:
        """Write JSON text to stdout as it comes (a streamed array), inert, the
        store's credentials masked."""
        print(self.target.mask(render.inert_json(text)), end="")

    def emit(self, value: Any, *, line: bool = False) -> None:
        """Print ``value`` as JSON (indented, or one line for a stream), inert,
        the store's credentials masked."""
        text = orjson.dumps(value).decode() if line else render.dump_json(value)
        print(self.target.mask(render.inert_json(text)), flush=line)
