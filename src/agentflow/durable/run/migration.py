"""Reading either record version, and the explicit migration of a v1 record.

:func:`decode_checkpoint` tells the versions apart as the original does: no
``schema_version`` is v1, ``vv-agent.checkpoint.v2`` is v2, anything else is
``checkpoint_schema_unsupported`` (never a fallback to v1). Decoding a v1
record never migrates it.

:func:`migrate_v1` applies the contract's migration rules:

* a record with a claim is refused (``checkpoint_migration_active_claim``),
  even one whose lease may have lapsed: its holder may still be writing;
* a **finished** record (a terminal result with status completed, failed or
  max_cycles) migrates: a v2 record under the caller's key, with the run
  definition the caller attests, its progress, revision and terminal result,
  and no journal. Admitting it replays that result without any call;
* any other record is not migrated: it has no journal, so it cannot prove
  that no external call went out after its last commit. The outcome says it
  needs reconciliation (status ``reconciliation_required``, reason
  ``legacy_non_terminal_unjournaled_operations``); ``wait_user`` is not a
  durable terminal in v1 either (the original's rule), with its own reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from agentflow.durable.enums import CheckpointStatus
from agentflow.durable.errors import DurableError
from agentflow.durable.run.definition import RUN_DEFINITION_SCHEMA, run_definition_digest
from agentflow.durable.run.record import CHECKPOINT_V2_SCHEMA, DurableCheckpoint
from agentflow.durable.run.v1 import CheckpointV1
from agentflow.durable.wire.canonical import canonical_json

__all__ = [
    "LEGACY_NON_TERMINAL",
    "LEGACY_WAIT_USER",
    "V1Migration",
    "decode_checkpoint",
    "migrate_v1",
]

#: Why a non-terminal v1 record needs reconciliation instead of a migration.
LEGACY_NON_TERMINAL: Final = "legacy_non_terminal_unjournaled_operations"
#: Why a v1 record waiting for its user is not migrated (the original's rule; our name).
LEGACY_WAIT_USER: Final = "legacy_wait_user_not_durable_terminal"
_MIGRATABLE: Final = frozenset(
    {CheckpointStatus.COMPLETED, CheckpointStatus.FAILED, CheckpointStatus.MAX_CYCLES}
)


def decode_checkpoint(payload: object) -> CheckpointV1 | DurableCheckpoint:
    """The record ``payload`` holds, of whichever version its discriminator names."""
    if not isinstance(payload, Mapping):
        raise DurableError("checkpoint_payload_invalid", "checkpoint payload must be an object")
    if "schema_version" not in payload:
        return CheckpointV1.from_dict(payload)
    if payload["schema_version"] != CHECKPOINT_V2_SCHEMA:
        raise DurableError(
            "checkpoint_schema_unsupported",
            "a present checkpoint schema discriminator is unsupported",
        )
    return DurableCheckpoint.from_dict(payload)


@dataclass(frozen=True)
class V1Migration:
    """What migrating one v1 record gave: the v2 record, or why there is none."""

    #: The migrated record's status, or ``reconciliation_required`` when refused.
    status: CheckpointStatus
    record: DurableCheckpoint | None = None
    reason: str | None = None

    @property
    def allowed(self) -> bool:
        return self.record is not None

    @property
    def terminal_result(self) -> dict[str, Any] | None:
        """The result a resume of the migrated record replays."""
        return None if self.record is None else self.record.terminal_result

    def require(self) -> DurableCheckpoint:
        """The migrated record, else the original's refusal
        (``checkpoint_migration_requires_reconciliation``)."""
        if self.record is None:
            raise DurableError(
                "checkpoint_migration_requires_reconciliation",
                f"only a durable v1 terminal can be migrated automatically ({self.reason})",
            )
        return self.record


def migrate_v1(
    payload: CheckpointV1 | Mapping[str, Any],
    *,
    key: str,
    run_definition: Mapping[str, Any],
    root_run_id: str | None = None,
    trace_id: str | None = None,
) -> V1Migration:
    """Migrate a v1 record (decoded, or its wire object) to a v2 record under ``key``.

    The caller supplies what v1 does not hold: the key, the run definition
    (normalized and redacted, as any v2 record's) and the run's identity
    (``root_run_id`` and ``trace_id``, both ``key`` unless given). Nothing is
    written: the caller creates the record. Refusals: an invalid v1 record
    (``checkpoint_v1_invalid``), a claim (``checkpoint_migration_active_claim``),
    a terminal result that is not I-JSON (``checkpoint_migration_invalid``),
    and a v2 record that does not validate (its own codes, e.g.
    ``checkpoint_definition_invalid`` for a bad definition).
    """
    source = payload if isinstance(payload, CheckpointV1) else CheckpointV1.from_dict(payload)
    if source.has_claim:
        raise DurableError(
            "checkpoint_migration_active_claim", "an active v1 claim cannot be migrated"
        )
    if source.terminal_result is None or source.status not in _MIGRATABLE:
        waiting = source.terminal_result is not None
        return V1Migration(
            CheckpointStatus.RECONCILIATION_REQUIRED,
            reason=LEGACY_WAIT_USER if waiting else LEGACY_NON_TERMINAL,
        )
    try:
        canonical_json(source.terminal_result, what="v1 terminal_result")
    except DurableError as exc:
        raise DurableError("checkpoint_migration_invalid", exc.message) from exc
    definition = dict(run_definition)
    record = DurableCheckpoint(
        schema_version=CHECKPOINT_V2_SCHEMA,
        run_definition_schema=RUN_DEFINITION_SCHEMA,
        run_definition=definition,
        checkpoint_key=key,
        task_id=source.task_id,
        root_run_id=key if root_run_id is None else root_run_id,
        trace_id=key if trace_id is None else trace_id,
        run_definition_digest=run_definition_digest(definition),
        cycle_index=source.cycle_index,
        status=source.status,
        messages=list(source.messages),
        cycles=list(source.cycles),
        shared_state=dict(source.shared_state),
        budget_usage=source.budget_usage,
        revision=source.revision,
        terminal_result=dict(source.terminal_result),
    )
    record.validate()
    return V1Migration(source.status, record)
