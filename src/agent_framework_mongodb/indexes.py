"""The indexes the checkpoint collection needs, provisioned only on request.

Index builds take locks and privileges a workflow's runtime should not have,
so construction, save, load and workflow hooks never touch indexes:
``ensure_indexes`` is an explicit provisioning step and ``validate_indexes``
only reads. Every scoped index starts with (scope_discriminator,
workflow_name, session_id) and carries a ``_kind`` partial filter, so the
counter document can never collide with checkpoint uniqueness. MongoDB TTL
indexes must be single-field, so the two expiration indexes are on
``expires_at`` alone, each filtered to its own kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CHECKPOINT_KIND",
    "COUNTER_KIND",
    "INDEX_SPECS",
    "SEQUENCE_INDEX",
    "SIMPLE_COLLATION",
    "IndexSpec",
    "collection_problems",
    "index_problems",
    "sequences_unique",
]

CHECKPOINT_KIND = "workflow_checkpoint"
COUNTER_KIND = "workflow_checkpoint_counter"
_SCOPE_PREFIX = (("scope_discriminator", 1), ("workflow_name", 1), ("session_id", 1))
#: The binary collation every query and index of this package names explicitly.
SIMPLE_COLLATION: dict[str, Any] = {"locale": "simple"}
#: The unique index that keeps a run's sequences unique.
SEQUENCE_INDEX = "checkpoint_scope_sequence"


@dataclass(frozen=True, slots=True)
class IndexSpec:
    """One required index: its name, keys and the options that matter for correctness."""

    name: str
    keys: tuple[tuple[str, int], ...]
    kind: str
    unique: bool = False
    ttl: bool = False

    def create_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "name": self.name,
            "partialFilterExpression": {"_kind": self.kind},
            "collation": SIMPLE_COLLATION,
        }
        if self.ttl:
            kwargs["expireAfterSeconds"] = 0
        if self.unique:
            kwargs["unique"] = True
        return kwargs


INDEX_SPECS: tuple[IndexSpec, ...] = (
    IndexSpec(
        "checkpoint_scope_identity",
        (*_SCOPE_PREFIX, ("checkpoint_id", 1)),
        CHECKPOINT_KIND,
        unique=True,
    ),
    IndexSpec(
        SEQUENCE_INDEX,
        (*_SCOPE_PREFIX, ("sequence", 1)),
        CHECKPOINT_KIND,
        unique=True,
    ),
    IndexSpec(
        "checkpoint_scope_lineage", (*_SCOPE_PREFIX, ("parent_checkpoint_id", 1)), CHECKPOINT_KIND
    ),
    IndexSpec("checkpoint_expiration", (("expires_at", 1),), CHECKPOINT_KIND, ttl=True),
    IndexSpec("checkpoint_counter_expiration", (("expires_at", 1),), COUNTER_KIND, ttl=True),
)


def index_problems(existing: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Differences between ``index_information()`` output and :data:`INDEX_SPECS`.

    Returns one line per missing or mismatched index (names only, no data),
    so callers can report exactly what provisioning would change.
    """
    problems = []
    for spec in INDEX_SPECS:
        info = existing.get(spec.name)
        if info is None:
            problems.append(f"{spec.name}: missing")
            continue
        if tuple((k, int(v)) for k, v in info.get("key", ())) != spec.keys:
            problems.append(f"{spec.name}: keys differ")
        if bool(info.get("unique", False)) != spec.unique:
            problems.append(f"{spec.name}: unique differs")
        if dict(info.get("partialFilterExpression", {})) != {"_kind": spec.kind}:
            problems.append(f"{spec.name}: partial filter differs")
        if spec.ttl and info.get("expireAfterSeconds") != 0:
            problems.append(f"{spec.name}: expireAfterSeconds differs")
        collation = info.get("collation")
        if collation is not None and collation.get("locale") != "simple":
            problems.append(f"{spec.name}: collation differs")
    return problems


def collection_problems(options: Mapping[str, Any]) -> list[str]:
    """Differences of a collection's ``options()`` that the indexes cannot fix.

    A default collation other than binary makes MongoDB build unpinned
    indexes (the collection's ``_id`` index among them) with it; queries
    stay correct because each pins ``simple``, but none can use those indexes.
    """
    collation = options.get("collation")
    if collation is not None and collation.get("locale") != "simple":
        return [
            f"collection: default collation differs (locale {collation.get('locale')!r}); "
            "queries pin simple, but create the collection without a default collation"
        ]
    return []


def sequences_unique(existing: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether ``index_information()`` output holds the unique sequence index as specified."""
    problems = index_problems(existing)
    return not any(line.startswith(f"{SEQUENCE_INDEX}:") for line in problems)
