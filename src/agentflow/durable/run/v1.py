"""``CheckpointV1``: the original's first checkpoint record, read for migration.

A v1 record has no ``schema_version``: that absence is its discriminator
(:func:`~agentflow.durable.run.migration.decode_checkpoint`). It holds a run's
committed progress (``task_id``, ``cycle_index``, ``status``, ``messages``,
``cycles``, ``shared_state``), an optional claim and terminal result, and
no journal: a v1 run that was not finished cannot prove that no external
call went out after its last commit, which is why only a finished one
migrates (:func:`~agentflow.durable.run.migration.migrate_v1`).

Decoding follows the original's v1 codec and refuses, with
``checkpoint_v1_invalid``, everything it refuses: its integers are the
original's widths (``cycle_index`` and ``claimed_cycle`` 32-bit, revision
and lease 64-bit), a claim is all or nothing and names the next cycle, a
terminal record holds no claim and its result's status is the record's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentflow.durable.enums import CheckpointStatus
from agentflow.durable.run.v1_values import (
    U32_MAX,
    U64_MAX,
    V1_STATUSES,
    check_budget_usage,
    check_cycle,
    check_message,
    check_terminal_result,
    invalid,
    unsigned,
)
from agentflow.durable.wire.canonical import parse_json
from agentflow.durable.wire.validators import is_blank

__all__ = ["CheckpointV1"]


@dataclass(frozen=True)
class CheckpointV1:
    """One v1 record, decoded and validated (build with :meth:`from_dict`)."""

    task_id: str
    cycle_index: int
    status: CheckpointStatus
    messages: list[dict[str, Any]] = field(default_factory=list)
    cycles: list[dict[str, Any]] = field(default_factory=list)
    shared_state: dict[str, Any] = field(default_factory=dict)
    revision: int = 0
    claim_token: str | None = None
    claimed_cycle: int | None = None
    lease_expires_at_ms: int | None = None
    terminal_result: dict[str, Any] | None = None
    budget_usage: dict[str, Any] | None = None

    @property
    def has_claim(self) -> bool:
        """True while a worker holds (or held, with its lease unknown) the record."""
        return self.claim_token is not None

    @classmethod
    def from_json(cls, data: bytes | str) -> CheckpointV1:
        """Strictly parse a v1 document (duplicate names refused: ``checkpoint_json_invalid``)."""
        return cls.from_dict(parse_json(data))

    @classmethod
    def from_dict(cls, payload: object) -> CheckpointV1:
        """Decode and validate a v1 wire object; every refusal is ``checkpoint_v1_invalid``."""
        if not isinstance(payload, Mapping):
            raise invalid("checkpoint payload must be an object")
        task_id = payload.get("task_id")
        if not isinstance(task_id, str) or is_blank(task_id):
            raise invalid("checkpoint task_id must be a non-empty string")
        cycle_index = unsigned(payload.get("cycle_index"), "checkpoint cycle_index", U32_MAX)
        status = payload.get("status")
        if not isinstance(status, str) or status not in V1_STATUSES:
            raise invalid(f"unknown checkpoint status: {status!r}")
        messages = _array(payload, "messages")
        for index, message in enumerate(messages):
            check_message(message, f"messages[{index}]")
        cycles = _array(payload, "cycles")
        for index, cycle in enumerate(cycles):
            check_cycle(cycle, f"cycles[{index}]")
        shared_state = payload.get("shared_state")
        if not isinstance(shared_state, dict):
            raise invalid("checkpoint shared_state must be an object")
        claim_token = payload.get("claim_token")
        if claim_token is not None and (not isinstance(claim_token, str) or not claim_token):
            raise invalid("checkpoint claim_token must be a non-empty string or null")
        record = cls(
            task_id=task_id,
            cycle_index=cycle_index,
            status=CheckpointStatus(status),
            messages=messages,
            cycles=cycles,
            shared_state=shared_state,
            revision=unsigned(payload.get("revision", 0), "checkpoint revision"),
            claim_token=claim_token,
            claimed_cycle=_optional(payload, "claimed_cycle", U32_MAX),
            lease_expires_at_ms=_optional(payload, "lease_expires_at_ms"),
            terminal_result=_optional_object(payload, "terminal_result"),
            budget_usage=_optional_object(payload, "budget_usage"),
        )
        record.validate()
        return record

    def validate(self) -> None:
        """The original's rules between fields (``checkpoint_v1_invalid``)."""
        claim = (self.claim_token, self.claimed_cycle, self.lease_expires_at_ms)
        if any(item is not None for item in claim) and any(item is None for item in claim):
            raise invalid(
                "checkpoint claim_token, claimed_cycle and lease_expires_at_ms are set together"
            )
        if self.terminal_result is not None and self.claim_token is not None:
            raise invalid("checkpoint terminal_result cannot have an active claim")
        if self.claimed_cycle is not None and (
            self.claimed_cycle == 0 or self.claimed_cycle != self.cycle_index + 1
        ):
            raise invalid("checkpoint claimed_cycle must be exactly cycle_index + 1")
        if self.terminal_result is not None:
            check_terminal_result(self.terminal_result, self.status.value)
        if self.budget_usage is not None:
            check_budget_usage(self.budget_usage)

    def to_dict(self) -> dict[str, Any]:
        """The v1 wire object, as the original writes it (absent members left out)."""
        out: dict[str, Any] = {
            "task_id": self.task_id,
            "cycle_index": self.cycle_index,
            "status": self.status.value,
            "messages": self.messages,
            "cycles": self.cycles,
            "shared_state": self.shared_state,
        }
        if self.revision:
            out["revision"] = self.revision
        optional = {
            "claim_token": self.claim_token,
            "claimed_cycle": self.claimed_cycle,
            "lease_expires_at_ms": self.lease_expires_at_ms,
            "terminal_result": self.terminal_result,
            "budget_usage": self.budget_usage,
        }
        out.update({name: value for name, value in optional.items() if value is not None})
        return out


def _array(payload: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    value = payload.get(name)
    if not isinstance(value, list):
        raise invalid(f"checkpoint {name} must be an array")
    return value


def _optional(payload: Mapping[str, Any], name: str, maximum: int = U64_MAX) -> int | None:
    value = payload.get(name)
    return None if value is None else unsigned(value, f"checkpoint {name}", maximum)


def _optional_object(payload: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    value = payload.get(name)
    if value is not None and not isinstance(value, dict):
        raise invalid(f"checkpoint {name} must be an object")
    return value
