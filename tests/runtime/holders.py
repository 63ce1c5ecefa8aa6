"""Another process's lease, taken by hand: a holder that then dies (never renews)."""

from __future__ import annotations

from collections.abc import Callable

from agentflow.durable import ClaimMode, DurableCheckpoint, DurableStore
from agentflow.runtime.leases import claim_token
from tests.runtime.clock import Clock


async def hold(
    store: DurableStore, thread: str, holder: str, *, lease_ms: int
) -> DurableCheckpoint:
    """Claim ``thread``'s next cycle in ``store`` as ``holder`` would, for ``lease_ms``."""
    record = await store.load(thread)
    assert record is not None, f"{thread!r} has no durable record"
    recovery = record.lease_expires_at_ms is not None or record.has_ambiguous_operation()
    return await store.claim(
        thread,
        cycle_index=record.cycle_index + 1,
        claim_token=claim_token(holder),
        lease_ms=lease_ms,
        mode=ClaimMode.RECOVERY if recovery else ClaimMode.CONTINUE,
    )


def epoch_ms(clock: Clock) -> Callable[[], int]:
    """``clock`` as the lease clock of a ``MemoryCheckpointer`` (epoch milliseconds)."""
    return lambda: int(clock.now.timestamp() * 1000)
