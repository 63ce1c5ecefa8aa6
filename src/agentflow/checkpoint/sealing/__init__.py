"""Sealed checkpoints: authenticated encryption bound to each record (opt in).

Needs the ``sealing`` extra (``pip install 'agentflow-durable[sealing]'``). Pass
``codec=SealedCodec(KeyRing.from_env())`` to any backend; docs/sealing.md has
the threat model, key rotation with :func:`rekey`, and migration.
"""

from agentflow.checkpoint.sealing.codec import OpenedHook, SealedCodec, checkpoint_context
from agentflow.checkpoint.sealing.command import CommandResult, load_keyring, rekey_command
from agentflow.checkpoint.sealing.keyring import (
    DEFAULT_KEYS_VARIABLE,
    KEY_BYTES,
    KeyRing,
    KeySource,
    new_key,
)
from agentflow.checkpoint.sealing.rekey import (
    LeftRecord,
    PartCounts,
    RekeyProgress,
    RekeyReport,
    StoreOpener,
    rekey,
)
from agentflow.checkpoint.sealing.sealer import (
    SEALED_VERSION,
    Opened,
    Sealer,
    is_sealed,
    record_context,
)

__all__ = [
    "DEFAULT_KEYS_VARIABLE",
    "KEY_BYTES",
    "SEALED_VERSION",
    "CommandResult",
    "KeyRing",
    "KeySource",
    "LeftRecord",
    "Opened",
    "OpenedHook",
    "PartCounts",
    "RekeyProgress",
    "RekeyReport",
    "SealedCodec",
    "Sealer",
    "StoreOpener",
    "checkpoint_context",
    "is_sealed",
    "load_keyring",
    "new_key",
    "record_context",
    "rekey",
    "rekey_command",
]
