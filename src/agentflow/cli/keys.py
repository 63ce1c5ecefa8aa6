"""Sealing keys on the command line: ``--keys-file PATH`` or ``$AGENTFLOW_SEALING_KEYS``.

With keys, every store a command opens is opened with ``SealedCodec(keyring)``:
sealed records read, new records are sealed, and a plaintext record is
refused. Without keys, a sealed record is refused as sealed (naming where the
keys go), not as undecodable bytes. The sealing package, and with it
``cryptography`` (the ``sealing`` extra), is imported only when keys are given.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Final

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.codec import CheckpointCodec, JsonCodec, RecordKey
from agentflow.cli.errors import SealingKeysInvalid, SealingUnavailable
from agentflow.errors import CheckpointCorrupted, InvalidArgument

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing

__all__ = ["KEYS_ENV", "KEYS_FROM", "keyring_from_args", "store_codec"]

#: Where the command line finds a key spec when ``--keys-file`` is not given.
KEYS_ENV: Final = "AGENTFLOW_SEALING_KEYS"
#: Where the command line takes sealing keys from, as an error message names it.
KEYS_FROM: Final = f"--keys-file PATH or ${KEYS_ENV}"
#: The first byte of every sealed record (``agentflow.checkpoint.sealing.is_sealed``).
SEALED_MARK: Final = b"\xaf"


def keyring_from_args(args: Any) -> KeyRing | None:
    """The key ring ``--keys-file`` or ``$AGENTFLOW_SEALING_KEYS`` names; None
    when neither does. A key spec that cannot be read or parsed is
    :class:`SealingKeysInvalid` (its text is never quoted)."""
    keys_file: str | None = getattr(args, "keys_file", None)
    if keys_file is None and not os.environ.get(KEYS_ENV):
        return None
    try:
        from agentflow.checkpoint.sealing import load_keyring
    except ImportError:
        raise SealingUnavailable(
            f"sealing keys are given ({KEYS_FROM}) but sealing is not installed: "
            "pip install 'agentflow-durable[sealing]' (from a clone: "
            "pip install -e '.[sealing]')"
        ) from None
    try:
        return load_keyring(keys_file, KEYS_ENV)
    except InvalidArgument as exc:
        where = "--keys-file" if keys_file is not None else f"${KEYS_ENV}"
        raise SealingKeysInvalid(f"{where}: {exc}") from None


class _RefusesSealed:
    """The default JSON codec, which names a sealed record as sealed."""

    __slots__ = ("_inner",)

    def __init__(self) -> None:
        self._inner = JsonCodec()

    def encode(self, cp: Checkpoint, key: RecordKey) -> bytes:
        return self._inner.encode(cp, key)

    def decode(self, payload: bytes, key: RecordKey, revision: int) -> Checkpoint:
        if payload[:1] == SEALED_MARK:
            raise CheckpointCorrupted(
                f"thread {key.thread!r} step {key.step} is sealed; give the store's "
                f"sealing keys with {KEYS_FROM}"
            )
        return self._inner.decode(payload, key, revision)


def store_codec(keyring: KeyRing | None) -> CheckpointCodec:
    """The codec a command opens its stores with: sealed under ``keyring``, or
    JSON that refuses sealed records with a hint."""
    if keyring is None:
        return _RefusesSealed()
    from agentflow.checkpoint.sealing import SealedCodec

    return SealedCodec(keyring)
