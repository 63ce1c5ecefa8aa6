"""Producer stability: what a durable run must pin, refused before any record or call."""

from __future__ import annotations

from typing import Any, cast

import pytest

from agentflow.durable import (
    BEHAVIOR_METADATA_SLOT,
    RECONCILIATION_PROVIDER_SLOT,
    CapabilityRef,
    DurableError,
    ReconciliationDecision,
    ResumeObservation,
    require_stable_producer,
)
from agentflow.runtime import Durability
from agentflow.runtime.durability import ExtensionFactory
from tests.durable.test_extensions import MethodAudit

REF = CapabilityRef("ledger.reconciler", "3")


class Ledger:
    async def reconcile(self, observation: ResumeObservation) -> ReconciliationDecision:
        return ReconciliationDecision.defer()


def code_of(call: Any) -> str:
    with pytest.raises(DurableError) as caught:
        call()
    return caught.value.code


def test_every_configured_capability_needs_a_stable_reference() -> None:
    require_stable_producer([], {})
    require_stable_producer(["runtime_hook:0"], {"runtime_hook:0": REF})
    with pytest.raises(DurableError) as caught:
        require_stable_producer(["runtime_hook:0", "reconciliation_provider"], {})
    assert caught.value.code == "checkpoint_definition_unstable"
    assert "runtime_hook:0, reconciliation_provider" in caught.value.message


def test_handoffs_and_callables_are_refused_first() -> None:
    assert code_of(lambda: require_stable_producer([], {}, handoffs=1)) == (
        "checkpoint_handoff_unsupported"
    )
    recorded = {"run_metadata": {"routes": [{"pick": len}], "a/b": print}}
    with pytest.raises(DurableError) as caught:
        require_stable_producer([], {}, recorded=recorded)
    assert caught.value.code == "checkpoint_definition_unstable"
    assert "/run_metadata/a~1b, /run_metadata/routes/0/pick" in caught.value.message


def test_a_graph_pins_its_provider_and_metadata_by_reference() -> None:
    unpinned = Durability(reconciliation=Ledger())
    assert code_of(lambda: unpinned.definition("g")) == "checkpoint_definition_unstable"
    assert code_of(lambda: Durability(metadata={"deploy": "v2"}).definition("g")) == (
        "checkpoint_definition_unstable"
    )
    callable_metadata = Durability(
        metadata={"hook": print}, capability_refs={BEHAVIOR_METADATA_SLOT: REF}
    )
    assert code_of(lambda: callable_metadata.definition("g")) == "checkpoint_definition_unstable"
    pinned = Durability(
        reconciliation=Ledger(),
        metadata={"deploy": "v2"},
        capability_refs={RECONCILIATION_PROVIDER_SLOT: REF, BEHAVIOR_METADATA_SLOT: REF},
    )
    definition = pinned.definition("g")
    assert definition.stored["capability_refs"] == {
        RECONCILIATION_PROVIDER_SLOT: REF.to_dict(),
        BEHAVIOR_METADATA_SLOT: REF.to_dict(),
    }
    other = Durability(
        reconciliation=Ledger(),
        metadata={"deploy": "v2"},
        capability_refs={
            RECONCILIATION_PROVIDER_SLOT: CapabilityRef("ledger.reconciler", "4"),
            BEHAVIOR_METADATA_SLOT: REF,
        },
    )
    assert other.definition("g").digest != definition.digest  # a new version is another run
    assert Durability().definition("g").stored["capability_refs"] == {}
    bad = Durability(capability_refs={"Bad Slot": REF})
    assert code_of(lambda: bad.definition("g")) == "checkpoint_capability_ref_invalid"


def test_a_graph_declares_extensions_written_with_methods() -> None:
    # The protocol types the members as properties; methods are accepted at run time.
    factory = cast(ExtensionFactory, MethodAudit)
    declared = Durability(extensions=[factory]).definition("g").stored["extensions"]
    assert declared == [{"namespace": "com.example.methods", "version": "2", "required": True}]
