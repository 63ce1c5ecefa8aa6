"""Sealing keys by id: one current key for new writes, older ones still read.

Keys come from a source (a callable returning a key spec), so they can live
in the environment, a file or a KMS; :meth:`KeyRing.reload` asks the source
again, so a rotation needs no restart. A key spec is JSON (or the same shape
as a mapping)::

    {"current": "2026-12", "keys": {"2026-12": "<base64 of 32 bytes>",
                                    "2026-06": "<base64 of 32 bytes>"},
     "retired": ["2026-06"]}

A *retired* key still opens what it sealed, so nothing becomes unreadable
while :func:`~agentflow.checkpoint.sealing.rekey` re-seals it, but every
process logs a warning the first time it opens a record with it, and rekey
reports the records left on it. A key removed from the ring no longer opens
anything: its records raise :class:`~agentflow.errors.CheckpointCorrupted`.

Key material never appears in a repr, an error or a log: the ring holds it
only inside ``cryptography``'s cipher objects, refuses to be pickled, and
parse errors are raised without the text that failed to parse.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
import os
import re
import secrets
import shlex
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NoReturn

import orjson

from agentflow.checkpoint.sealing.cipher import AEAD
from agentflow.errors import InvalidArgument

__all__ = [
    "DEFAULT_KEYS_VARIABLE",
    "KEY_BYTES",
    "RETIRED_WARNING",
    "KeyRing",
    "KeySource",
    "new_key",
]

#: The environment variable :meth:`KeyRing.from_env` reads by default.
DEFAULT_KEYS_VARIABLE: Final = "AGENTFLOW_SEALING_KEYS"
#: AES-256 keys.
KEY_BYTES: Final = 32
_KEY_ID: Final = re.compile(r"[A-Za-z0-9._-]{1,64}")
_log = logging.getLogger("agentflow.sealing")
#: Logged the first time a ring opens a record with a retired key (a rekey, which
#: re-seals those records, does not say it).
RETIRED_WARNING: Final = (
    "a record was opened with retired sealing key %r; "
    "re-seal the store with the current key (agentflow rekey)"
)
#: Permission bits of a key file that let anyone but its owner read or write it.
_SHARED: Final = 0o077
_UNPARSED: Final = object()

#: Returns a key spec: its JSON text, or the same shape as a mapping.
KeySource = Callable[[], "str | bytes | Mapping[str, object]"]


def new_key() -> str:
    """A fresh random key, as the base64 text a key spec holds."""
    return base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode("ascii")


def check_key_id(key_id: object) -> str:
    """``key_id`` when it is 1 to 64 letters, digits, ``.``, ``_`` or ``-``."""
    if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
        raise InvalidArgument(
            f"a key id is 1 to 64 letters, digits, '.', '_' or '-', got {key_id!r:.80}"
        )
    return key_id


@dataclass(frozen=True, slots=True)
class _Keys:
    ciphers: Mapping[str, AEAD]
    current: str
    retired: frozenset[str]


class KeyRing:
    """The keys records are sealed with, by id; see the module docstring."""

    __slots__ = ("__weakref__", "_keys", "_source", "_warned")

    def __init__(
        self, keys: Mapping[str, bytes], *, current: str, retired: Iterable[str] = ()
    ) -> None:
        self._keys = _build(keys, current, retired)
        self._source: KeySource | None = None
        self._warned: set[str] = set()

    @classmethod
    def from_source(cls, source: KeySource) -> KeyRing:
        """A ring loaded from ``source`` now and again on every :meth:`reload`."""
        ring = cls.__new__(cls)
        ring._source, ring._warned = source, set()
        ring._keys = _from_spec(source())
        return ring

    @classmethod
    def from_env(
        cls, variable: str = DEFAULT_KEYS_VARIABLE, *, environ: Mapping[str, str] | None = None
    ) -> KeyRing:
        """A ring from the key spec in environment variable ``variable``."""
        env = os.environ if environ is None else environ

        def read() -> str:
            text = env.get(variable)
            if not text:
                raise InvalidArgument(f"environment variable {variable} holds no sealing keys")
            return text

        return cls.from_source(read)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> KeyRing:
        """A ring from the key spec in the file at ``path``, which only its owner
        may read or write (mode 0600: anything more is refused, naming the fix)."""
        where = Path(path)

        def read() -> bytes:
            try:
                with where.open("rb") as file:
                    mode = os.fstat(file.fileno()).st_mode
                    if mode & _SHARED:
                        raise InvalidArgument(
                            f"sealing keys in {str(where)!r} can be read or written by others "
                            f"(mode {stat.S_IMODE(mode):04o}); make the file its owner's "
                            f"only: chmod 600 {shlex.quote(str(where))}"
                        )
                    return file.read()
            except OSError as exc:
                reason = exc.strerror
            raise InvalidArgument(f"cannot read sealing keys from {str(where)!r}: {reason}")

        return cls.from_source(read)

    def reload(self) -> None:
        """Load the keys from the source again (a ring built from a mapping has none)."""
        if self._source is None:
            raise InvalidArgument("this KeyRing was built from a mapping; it has no source")
        self._keys = _from_spec(self._source())

    @property
    def current(self) -> str:
        """The id of the key new records are sealed with."""
        return self._keys.current

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Every key id in the ring, sorted."""
        return tuple(sorted(self._keys.ciphers))

    @property
    def retired(self) -> frozenset[str]:
        """The ids of keys that still open records but should seal nothing."""
        return self._keys.retired

    def sealing_key(self) -> tuple[str, AEAD]:
        """The current key's id and cipher (one consistent pair across a reload)."""
        keys = self._keys
        return keys.current, keys.ciphers[keys.current]

    def opening_key(self, key_id: str) -> AEAD | None:
        """The cipher of ``key_id``, or None when the ring has no such key."""
        keys = self._keys
        cipher = keys.ciphers.get(key_id)
        if cipher is not None and key_id in keys.retired and key_id not in self._warned:
            self._warned.add(key_id)
            _log.warning(RETIRED_WARNING, key_id)
        return cipher

    def __repr__(self) -> str:
        keys = self._keys
        return (
            f"KeyRing(current={keys.current!r}, keys={self.key_ids!r}, "
            f"retired={tuple(sorted(keys.retired))!r})"
        )

    def __reduce__(self) -> NoReturn:
        raise TypeError("a KeyRing cannot be pickled: its keys stay in this process")


def _build(keys: Mapping[str, bytes], current: str, retired: Iterable[str]) -> _Keys:
    if not isinstance(keys, Mapping) or not keys:
        raise InvalidArgument("a KeyRing needs a mapping of at least one key id to its key")
    ciphers: dict[str, AEAD] = {}
    for key_id, material in keys.items():
        check_key_id(key_id)
        if not isinstance(material, bytes) or len(material) != KEY_BYTES:
            raise InvalidArgument(f"key {key_id!r} must be {KEY_BYTES} bytes")
        ciphers[key_id] = AEAD(material)
    check_key_id(current)
    if current not in ciphers:
        raise InvalidArgument(f"the current key {current!r} is not in the ring")
    if isinstance(retired, str):
        raise InvalidArgument("retired is a list of key ids, not one string")
    gone = frozenset(retired)
    for key_id in gone:
        if check_key_id(key_id) not in ciphers:
            raise InvalidArgument(f"retired key {key_id!r} is not in the ring")
    if current in gone:
        raise InvalidArgument(f"the current key {current!r} cannot be retired")
    return _Keys(ciphers, current, gone)


def _from_spec(spec: object) -> _Keys:
    """Parse a key spec; errors never quote it, and chain nothing that holds it."""
    if isinstance(spec, str | bytes):
        text, spec = spec, _UNPARSED
        # The decode error holds the text: it must not become this error's context.
        with contextlib.suppress(orjson.JSONDecodeError):
            spec = orjson.loads(text)
        if spec is _UNPARSED:
            raise InvalidArgument("the sealing key spec is not valid JSON")
    if not isinstance(spec, Mapping):
        raise InvalidArgument("a sealing key spec is an object with 'current' and 'keys'")
    unknown = set(spec) - {"current", "keys", "retired"}
    if unknown:
        raise InvalidArgument(f"a sealing key spec has no field {sorted(unknown)[0]!r:.80}")
    keys, retired = spec.get("keys"), spec.get("retired", [])
    if not isinstance(keys, Mapping):
        raise InvalidArgument("the key spec's 'keys' must map key ids to base64 keys")
    if not isinstance(retired, list):
        raise InvalidArgument("the key spec's 'retired' must be a list of key ids")
    current = spec.get("current")
    if not isinstance(current, str):
        raise InvalidArgument("the key spec's 'current' must be a key id")
    return _build({check_key_id(k): _material(k, v) for k, v in keys.items()}, current, retired)


def _material(key_id: str, text: object) -> bytes:
    if isinstance(text, str):
        cleaned = text.strip().replace("-", "+").replace("_", "/")
        try:
            raw = base64.b64decode(cleaned + "=" * (-len(cleaned) % 4), validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) == KEY_BYTES:
            return raw
    raise InvalidArgument(f"key {key_id!r} must be the base64 text of {KEY_BYTES} bytes")
