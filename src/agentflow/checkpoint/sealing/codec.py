"""The sealing codec: any codec's bytes, sealed for the checkpoint they encode."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, Final

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.codec import CheckpointCodec, JsonCodec, RecordKey
from agentflow.checkpoint.sealing.keyring import KeyRing
from agentflow.checkpoint.sealing.sealer import (
    Refused,
    Sealer,
    is_sealed,
    open_sealed,
    record_context,
)
from agentflow.errors import CheckpointCorrupted, InvalidArgument

if TYPE_CHECKING:
    from agentflow.checkpoint.envelope import PartOpened

__all__ = ["OpenedHook", "SealedCodec", "checkpoint_context"]

#: Called after each record is opened: its key and the key id (None: plaintext).
OpenedHook = Callable[[RecordKey, "str | None"], None]


_KIND: Final = record_context("checkpoint")
_LENGTH: Final = struct.Struct(">I").pack


def checkpoint_context(key: RecordKey) -> bytes:
    """What a sealed checkpoint is bound to: store, namespace, thread and step.

    The same bytes as ``record_context("checkpoint", key.store, key.namespace,
    key.thread, key.step)``, built without the general loop (it runs per record).
    """
    store, namespace, thread = key.store, key.namespace.encode(), key.thread.encode()
    step = b"%d" % key.step
    return b"".join(
        (
            _KIND,
            _LENGTH(len(store)),
            store,
            _LENGTH(len(namespace)),
            namespace,
            _LENGTH(len(thread)),
            thread,
            _LENGTH(len(step)),
            step,
        )
    )


class SealedCodec:
    """Seals what ``inner`` (JSON by default) encodes; opens and checks on decode.

    Pass it as ``codec=`` to any backend. It binds the store's identity
    (:attr:`RecordKey.store`), so a record replayed into another store does not
    open. A record that is not sealed is refused, unless ``accept_plaintext``
    is set: only while a plaintext store is migrated (docs/sealing.md).
    ``on_open`` hears of every record opened, with the key id that opened it.
    A store given this codec keeps its durable records and events in the
    same mode (:class:`~agentflow.checkpoint.envelope.StoredParts`): plaintext
    parts open with ``accept_plaintext``, and ``on_open_part`` hears of every
    part opened.
    """

    binds_store: ClassVar[bool] = True
    __slots__ = ("_accept_plaintext", "_inner", "_keyring", "_on_open", "_on_open_part", "_sealer")

    def __init__(
        self,
        keyring: KeyRing,
        inner: CheckpointCodec | None = None,
        *,
        accept_plaintext: bool = False,
        on_open: OpenedHook | None = None,
        on_open_part: PartOpened | None = None,
    ) -> None:
        if inner is not None and not isinstance(inner, CheckpointCodec):
            raise InvalidArgument(f"inner must be a codec, got {type(inner).__name__}")
        if getattr(inner, "binds_store", False):
            raise InvalidArgument("inner must not be a sealing codec itself")
        self._sealer = Sealer(keyring)
        self._keyring = keyring
        self._inner: CheckpointCodec = inner or JsonCodec()
        self._accept_plaintext = bool(accept_plaintext)
        self._on_open = on_open
        self._on_open_part = on_open_part

    @property
    def keyring(self) -> KeyRing:
        return self._keyring

    @property
    def accept_plaintext(self) -> bool:
        """Records that are not sealed still open (a store being moved to sealing)."""
        return self._accept_plaintext

    @property
    def on_open_part(self) -> PartOpened | None:
        """Told of each durable part a store with this codec opens (see the class)."""
        return self._on_open_part

    def __repr__(self) -> str:
        plaintext = ", accept_plaintext=True" if self._accept_plaintext else ""
        return f"SealedCodec({self._keyring!r}, inner={self._inner!r}{plaintext})"

    def encode(self, cp: Checkpoint, key: RecordKey) -> bytes:
        return self._sealer.seal(self._inner.encode(cp, key), checkpoint_context(key))

    def decode(self, payload: bytes, key: RecordKey, revision: int) -> Checkpoint:
        key_id: str | None = None
        if self._accept_plaintext and not is_sealed(payload):
            plaintext = payload
        else:
            try:
                plaintext, key_id = open_sealed(self._keyring, payload, checkpoint_context(key))
            except Refused as exc:
                where = f"thread {key.thread!r} step {key.step}"
                raise CheckpointCorrupted(f"{where}: {exc}") from None
        if self._on_open is not None:
            self._on_open(key, key_id)
        return self._inner.decode(plaintext, key, revision)
