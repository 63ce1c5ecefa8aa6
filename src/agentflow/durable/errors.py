"""Errors of the durable layer, each carrying the original's stable code.

Every value check of the durable layer raises :class:`DurableError` whose
instance ``code`` is the string the Rust original (vv-agent) emits for the same
failure, so a caller, a log search or a cross-language test can branch on it.
``str(error)`` is ``"{code}: {message}"`` exactly as the original prints it.
The original reads the code with the methods ``code()`` and ``error_code()``;
here ``code`` is an :class:`ErrorCode`, a string that also answers when
called, so ``error.code == "x"``, ``error.code()`` and ``error.error_code()``
all agree and code ported from the original reads it unchanged.

A store that refuses a conditional write raises one of the subclasses of
:class:`DurableConflict` below. Their codes come from the language-neutral
contract, because the original's stores answer ``false`` without a reason.
"""

from __future__ import annotations

from agentflow.errors import AgentflowError, CheckpointCorrupted

__all__ = [
    "CheckpointAlreadyExists",
    "CheckpointNotFound",
    "ClaimActive",
    "CycleConflict",
    "DurableConflict",
    "DurableCorrupted",
    "DurableError",
    "ErrorCode",
    "LeaseLost",
    "RecoveryRequired",
    "RevisionConflict",
    "TerminalImmutable",
]


class ErrorCode(str):
    """A stable error code; calling it returns the plain string (the original's ``code()``)."""

    __slots__ = ()

    def __call__(self) -> str:
        return str.__str__(self)


class DurableError(AgentflowError):
    """A durable-layer value or state was refused; ``code`` says which rule."""

    code: ErrorCode = ErrorCode("durable_error")

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)
        # Narrower than AgentflowError's ``str``: every code of this class is an ErrorCode.
        self.code = ErrorCode(code)  # pyright: ignore[reportIncompatibleVariableOverride]
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def error_code(self) -> str:
        """The code, under the name the original's API uses (always equal to ``code``)."""
        return self.code()


class DurableCorrupted(DurableError, CheckpointCorrupted):
    """Stored durable data failed to decode or validate; it is never read as absent.

    ``code`` is the rule the stored bytes broke (for example
    ``checkpoint_json_invalid``); the decoding error is the ``__cause__``.
    """

    code: ErrorCode = ErrorCode("checkpoint_corrupted")


class _FixedCode(DurableError):
    """A durable error whose code is fixed by its class."""

    def __init__(self, message: str) -> None:
        Exception.__init__(self, message)
        self.code = type(self).code
        self.message = message


class CheckpointNotFound(_FixedCode):
    """No durable record exists under the key in this store's namespace."""

    code = ErrorCode("checkpoint_not_found")


class DurableConflict(_FixedCode):
    """A conditional write lost: the stored record is not in the state it requires.

    Nothing was written. Re-read the record and decide again; the subclass
    says which precondition failed.
    """

    code = ErrorCode("checkpoint_store_conflict")


class CheckpointAlreadyExists(DurableConflict):
    """``create`` found a record under the key already."""

    code = ErrorCode("checkpoint_already_exists")


class RevisionConflict(DurableConflict):
    """The stored revision moved on since the caller read it (same claim)."""

    code = ErrorCode("checkpoint_revision_conflict")


class ClaimActive(DurableConflict):
    """Another holder's live lease (or any claim, for an unclaimed write) is in the way."""

    code = ErrorCode("checkpoint_claim_active")


class LeaseLost(DurableConflict):
    """The caller's claim is gone: replaced by a recovery claim, released, or expired.

    This is the fencing error: a holder that sees it must not start another
    external call under that claim.
    """

    code = ErrorCode("checkpoint_lease_lost")


class TerminalImmutable(DurableConflict):
    """The record is terminal; only event delivery and acknowledgement may follow."""

    code = ErrorCode("checkpoint_terminal_immutable")


class CycleConflict(DurableConflict):
    """The claimed cycle is not the one after the record's committed cycle."""

    code = ErrorCode("checkpoint_cycle_conflict")


class RecoveryRequired(DurableConflict):
    """Only a recovery claim may take this record (ambiguity, reconciliation, or a lapsed lease)."""

    code = ErrorCode("checkpoint_recovery_required")
