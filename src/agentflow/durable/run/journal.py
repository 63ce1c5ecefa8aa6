"""The operation journal: one entry per external model or tool call.

An entry is written durably as ``planned`` and then ``started`` *before* the
call goes out, and as ``succeeded`` (with its receipt), ``failed`` (with a
typed error) or ``ambiguous`` after it. A started entry found by a recovery
claim becomes ambiguous: the call may have happened. Entries are immutable
values; every transition returns a new entry and refuses illegal moves with
``operation_transition_invalid``::

    planned   -> started | failed
    started   -> succeeded | failed | ambiguous
    ambiguous -> planned (a retry: attempt + 1) | succeeded | failed

A call may legitimately return JSON ``null`` (a tool that acts and answers
nothing). The wire cannot say so directly: a ``null`` member reads as absent,
so a succeeded entry with ``result: null`` is ``operation_receipt_required``
in the contract. Such a receipt is therefore stored as the object
:data:`NULL_RECEIPT`, and a receipt that happens to look like the marker is
stored wrapped (``{"agentflow.receipt": "escaped", "value": ...}``), so every
stored entry stays valid for the original and :attr:`OperationJournalEntry.receipt`
gives back exactly what the call returned.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from agentflow.durable.enums import OperationKind, OperationState, ToolIdempotency, parse_enum
from agentflow.durable.errors import DurableError
from agentflow.durable.wire.canonical import validate_i_json
from agentflow.durable.wire.digests import operation_request_digest
from agentflow.durable.wire.validators import is_blank, require_positive, validate_sha256

__all__ = [
    "ALLOWED_TRANSITIONS",
    "NULL_RECEIPT",
    "OperationError",
    "OperationJournalEntry",
    "decode_receipt",
    "encode_receipt",
]

_S = OperationState
#: Every legal (from, to) pair of journal states.
ALLOWED_TRANSITIONS = frozenset(
    {
        (_S.PLANNED, _S.FAILED),
        (_S.PLANNED, _S.STARTED),
        (_S.STARTED, _S.SUCCEEDED),
        (_S.STARTED, _S.FAILED),
        (_S.STARTED, _S.AMBIGUOUS),
        (_S.AMBIGUOUS, _S.PLANNED),
        (_S.AMBIGUOUS, _S.SUCCEEDED),
        (_S.AMBIGUOUS, _S.FAILED),
    }
)
_JOURNAL = "operation_journal_invalid"
_FIELDS = "operation_kind_fields_invalid"
_TOOL_FIELDS = ("tool_call_id", "tool_name", "arguments", "idempotency_support", "result")
_MARK = "agentflow.receipt"
#: The stored form of a receipt that is JSON null.
NULL_RECEIPT: Mapping[str, str] = MappingProxyType({_MARK: "null"})
#: ``transition_to`` was given no receipt (``None`` is a receipt: JSON null).
_NO_RECEIPT: Any = object()


def encode_receipt(receipt: Any) -> Any:
    """The stored form of a success receipt: itself, unless it is null or looks like the marker."""
    if receipt is None:
        return dict(NULL_RECEIPT)
    if isinstance(receipt, Mapping) and _MARK in receipt:
        return {_MARK: "escaped", "value": receipt}
    return receipt


def decode_receipt(stored: Any) -> Any:
    """What :func:`encode_receipt` was given (a stored receipt without the marker is itself)."""
    if isinstance(stored, Mapping) and _MARK in stored:
        if dict(stored) == NULL_RECEIPT:
            return None
        if stored.keys() == {_MARK, "value"} and stored[_MARK] == "escaped":
            return stored["value"]
    return stored


@dataclass(frozen=True, slots=True)
class OperationError:
    """The typed error of a failed operation."""

    code: str
    message: str
    retryable: bool = False

    def validate(self) -> None:
        if (
            not isinstance(self.code, str)
            or not isinstance(self.message, str)
            or is_blank(self.code)
            or is_blank(self.message)
        ):
            raise DurableError(
                "operation_error_invalid", "operation error code and message must be non-empty"
            )

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "retryable": self.retryable}

    @classmethod
    def from_dict(cls, value: object) -> OperationError:
        code = "operation_error_invalid"
        if not isinstance(value, Mapping):
            raise DurableError(code, "operation error must be an object")
        for name in ("code", "message"):
            if not isinstance(value.get(name), str):
                raise DurableError(code, f"{name} must be a string")
        if not isinstance(value.get("retryable"), bool):
            raise DurableError(code, "operation error retryable must be a boolean")
        error = cls(value["code"], value["message"], value["retryable"])
        error.validate()
        return error


@dataclass(frozen=True, slots=True)
class OperationJournalEntry:
    """One journaled external call. Build with :meth:`model` or :meth:`tool`."""

    kind: OperationKind
    operation_id: str
    cycle_index: int
    attempt: int
    request_digest: str
    state: OperationState = OperationState.PLANNED
    idempotency_key: str | None = None
    response: Any = None
    error: OperationError | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    arguments: dict[str, Any] | None = field(default=None, hash=False)
    idempotency_support: ToolIdempotency | None = None
    result: Any = None

    @classmethod
    def model(
        cls,
        operation_id: str,
        cycle_index: int,
        request_digest: str,
        *,
        attempt: int = 1,
        idempotency_key: str | None = None,
    ) -> OperationJournalEntry:
        """A planned model call."""
        return cls(
            OperationKind.MODEL,
            operation_id,
            cycle_index,
            attempt,
            request_digest,
            idempotency_key=idempotency_key,
        )

    @classmethod
    def tool(
        cls,
        operation_id: str,
        cycle_index: int,
        request_digest: str,
        *,
        tool_call_id: str,
        tool_name: str,
        arguments: dict[str, Any],
        idempotency_key: str,
        idempotency_support: ToolIdempotency = ToolIdempotency.UNKNOWN,
        attempt: int = 1,
    ) -> OperationJournalEntry:
        """A planned tool call; tools always carry their idempotency key."""
        return cls(
            OperationKind.TOOL,
            operation_id,
            cycle_index,
            attempt,
            request_digest,
            idempotency_key=idempotency_key,
            tool_call_id=tool_call_id,
            tool_name=tool_name,
            arguments=arguments,
            idempotency_support=idempotency_support,
        )

    @property
    def receipt(self) -> Any:
        """The success receipt as the call returned it (None for a null receipt, or no receipt)."""
        stored = self.response if self.kind is OperationKind.MODEL else self.result
        return decode_receipt(stored)

    def validate(self) -> None:
        """Raise the original's code for the first inconsistency of this entry."""
        if not isinstance(self.operation_id, str) or is_blank(self.operation_id):
            raise DurableError("operation_id_invalid", "operation_id must be non-empty")
        require_positive(self.cycle_index, "operation cycle_index", "operation_cycle_invalid")
        require_positive(self.attempt, "operation attempt", "operation_attempt_invalid")
        validate_sha256(
            self.request_digest, "operation request_digest", "operation_request_digest_invalid"
        )
        if self.response is not None:
            validate_i_json(self.response, "operation response")
        if self.result is not None:
            validate_i_json(self.result, "operation result")
        if self.error is not None:
            self.error.validate()
        if self.kind is OperationKind.MODEL:
            if any(getattr(self, name) is not None for name in _TOOL_FIELDS):
                raise DurableError(_FIELDS, "model journal entries cannot contain tool fields")
        else:
            if (
                not self.tool_call_id
                or not self.tool_name
                or not self.idempotency_key
                or self.arguments is None
                or self.idempotency_support is None
            ):
                raise DurableError(
                    "tool_idempotency_key_required",
                    "tool journal entries require call, arguments, idempotency key, and support",
                )
            if self.response is not None:
                raise DurableError(_FIELDS, "tool journal entries cannot contain model responses")
            validate_i_json(self.arguments, "tool journal arguments")
        self._validate_receipts()

    def _validate_receipts(self) -> None:
        if self.state is OperationState.SUCCEEDED:
            stored = self.response if self.kind is OperationKind.MODEL else self.result
            if stored is None or self.error is not None:
                raise DurableError(
                    "operation_receipt_required", "succeeded operation requires one success receipt"
                )
        elif self.state is OperationState.FAILED:
            if self.error is None or self.response is not None or self.result is not None:
                raise DurableError(
                    "operation_error_required", "failed operation requires one typed error"
                )
        elif self.response is not None or self.result is not None or self.error is not None:
            raise DurableError(
                "operation_receipt_unexpected", "non-terminal operation cannot contain a receipt"
            )

    def transition_to(
        self,
        state: OperationState,
        *,
        receipt: Any = _NO_RECEIPT,
        error: OperationError | None = None,
    ) -> OperationJournalEntry:
        """The entry moved to ``state``, with the receipt or error that state needs.

        ``receipt`` is the model response or tool result for ``succeeded``
        (``None`` is a receipt, JSON null: see :data:`NULL_RECEIPT`); without
        one, ``succeeded`` is ``operation_receipt_required``. ``error`` is
        required for ``failed``. Moving an ambiguous entry back to ``planned``
        is a retry and bumps ``attempt``.
        """
        if (self.state, state) not in ALLOWED_TRANSITIONS:
            raise DurableError(
                "operation_transition_invalid",
                f"cannot transition {self.state.value} to {state.value}",
            )
        is_model = self.kind is OperationKind.MODEL
        succeeded = state is OperationState.SUCCEEDED
        stored = None if receipt is _NO_RECEIPT else encode_receipt(receipt)
        entry = replace(
            self,
            state=state,
            attempt=self.attempt + 1 if state is OperationState.PLANNED else self.attempt,
            response=stored if succeeded and is_model else None,
            result=stored if succeeded and not is_model else None,
            error=error if state is OperationState.FAILED else None,
        )
        entry.validate()
        return entry

    def start(self) -> OperationJournalEntry:
        return self.transition_to(OperationState.STARTED)

    def succeed(self, receipt: Any) -> OperationJournalEntry:
        """Settle with the call's receipt (``None`` included: a null receipt)."""
        return self.transition_to(OperationState.SUCCEEDED, receipt=receipt)

    def fail(self, error: OperationError) -> OperationJournalEntry:
        return self.transition_to(OperationState.FAILED, error=error)

    def mark_ambiguous(self) -> OperationJournalEntry:
        return self.transition_to(OperationState.AMBIGUOUS)

    def retry(self) -> OperationJournalEntry:
        """Plan an ambiguous entry again: same id, digest and key; attempt + 1."""
        if self.state is not OperationState.AMBIGUOUS:
            raise DurableError(
                "operation_transition_invalid", "only ambiguous operations can be retried"
            )
        return self.transition_to(OperationState.PLANNED)

    def same_call(self, other: OperationJournalEntry) -> bool:
        """True when ``other`` journals the same logical call (any state or attempt)."""
        return (
            self.kind is other.kind
            and self.operation_id == other.operation_id
            and self.cycle_index == other.cycle_index
            and self.request_digest == other.request_digest
            and self.idempotency_key == other.idempotency_key
            and self.tool_call_id == other.tool_call_id
            and self.tool_name == other.tool_name
            and self.arguments == other.arguments
            and self.idempotency_support is other.idempotency_support
        )

    def verify_request(self, request: Mapping[str, Any]) -> None:
        """Refuse (``checkpoint_journal_integrity_mismatch``) a request that is not this call's."""
        if operation_request_digest(request, kind=self.kind) != self.request_digest:
            raise DurableError(
                "checkpoint_journal_integrity_mismatch",
                "operation request does not match the durable request_digest",
            )

    def to_dict(self) -> dict[str, Any]:
        """The wire form: model entries carry ``response``, tool entries the tool fields."""
        out: dict[str, Any] = {
            "kind": self.kind.value,
            "operation_id": self.operation_id,
            "cycle_index": self.cycle_index,
            "attempt": self.attempt,
            "state": self.state.value,
            "request_digest": self.request_digest,
            "idempotency_key": self.idempotency_key,
        }
        if self.kind is OperationKind.MODEL:
            out["response"] = self.response
        else:
            support = self.idempotency_support
            out["tool_call_id"] = self.tool_call_id
            out["tool_name"] = self.tool_name
            out["arguments"] = self.arguments
            out["idempotency_support"] = None if support is None else support.value
            out["result"] = self.result
        out["error"] = None if self.error is None else self.error.to_dict()
        return out

    @classmethod
    def from_dict(cls, value: object) -> OperationJournalEntry:
        """Read the wire form and validate it (a null member reads as absent)."""
        if not isinstance(value, Mapping):
            raise DurableError(_JOURNAL, "operation journal entry must be an object")
        if "kind" not in value or "state" not in value:
            raise DurableError(_JOURNAL, "kind and state are required")
        arguments = value.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            raise DurableError(_FIELDS, "tool arguments must be an object")
        support = value.get("idempotency_support")
        error = value.get("error")
        entry = cls(
            kind=parse_enum(OperationKind, value["kind"], _JOURNAL, "operation kind"),
            state=parse_enum(OperationState, value["state"], _JOURNAL, "operation state"),
            operation_id=_string(value, "operation_id", _JOURNAL),
            cycle_index=_integer(value, "cycle_index", "operation_cycle_invalid"),
            attempt=_integer(value, "attempt", "operation_attempt_invalid"),
            request_digest=_string(value, "request_digest", "operation_request_digest_invalid"),
            idempotency_key=_optional_string(value, "idempotency_key"),
            response=value.get("response"),
            error=None if error is None else OperationError.from_dict(error),
            tool_call_id=_optional_string(value, "tool_call_id"),
            tool_name=_optional_string(value, "tool_name"),
            arguments=arguments,
            idempotency_support=(
                None
                if support is None
                else parse_enum(ToolIdempotency, support, _FIELDS, "tool idempotency support")
            ),
            result=value.get("result"),
        )
        entry.validate()
        return entry


def _string(value: Mapping[str, Any], name: str, code: str) -> str:
    item = value.get(name)
    if not isinstance(item, str):
        raise DurableError(code, f"{name} must be a string")
    return item


def _optional_string(value: Mapping[str, Any], name: str) -> str | None:
    item = value.get(name)
    if item is not None and not isinstance(item, str):
        raise DurableError(_FIELDS, f"{name} must be a string or null")
    return item


def _integer(value: Mapping[str, Any], name: str, code: str) -> int:
    item = value.get(name)
    if isinstance(item, bool) or not isinstance(item, int) or item < 0:
        raise DurableError(code, f"{name} must be a JSON-safe integer")
    return item
