"""Another process's lease, taken by hand: a holder that then dies (never renews)."""

from __future__ import annotations

from collections.abc import Callable

from agentflow.durable import ClaimMode, DurableCheckpoint, DurableStore
from agentflow.runtime.leases import claim_token
from tests.runtime.clock import Clock


async def hold(
    durable: DurableStore, thread: str, holder: str, *, lease_ms: int
) -> DurableCheckpoint:
    """Claim ``thread``'s next cycle as ``holder`` would, for ``lease_ms``."""
    record = await durable.load(thread)
    assert record is not None, f"{thread!r} has no durable record"
    recovery = record.lease_expires_at_ms is not None or record.has_ambiguous_operation()
    return await durable.claim(
        thread,
        cycle_index=record.cycle_index + 1,
        claim_token=claim_token(holder),
        lease_ms=lease_ms,
        mode=ClaimMode.RECOVERY if recovery else ClaimMode.CONTINUE,
    )


def epoch_ms(clock: Clock) -> Callable[[], int]:
    """``clock`` as the lease clock of a ``MemoryDurableStore`` (epoch milliseconds)."""
    return lambda: int(clock.now.timestamp() * 1000)
