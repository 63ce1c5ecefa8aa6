"""The persistent journal: every version reads as it was made, writes cost no copy.

A reference model (plain lists, copied per put) is run beside
:class:`~agentflow.durable.run.journals.Journal` over random puts on random
versions, so versions that became old, branched or were copied out are all
compared with what they should hold.
"""

from __future__ import annotations

import copy
import pickle
import random
from dataclasses import replace

import pytest

from agentflow.checkpoint.memory import MemoryCheckpointer
from agentflow.checkpoint.plans import plan_record_operations
from agentflow.durable import OperationJournalEntry, OperationState
from agentflow.durable.run.journals import Journal, ambiguous_in, journal_of
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.runtime.leases import Lease

DIGEST = "a" * 64


def entry(n: int, state: OperationState = OperationState.STARTED) -> OperationJournalEntry:
    started = OperationJournalEntry.model(f"op-{n}", 1, DIGEST).start()
    if state is OperationState.SUCCEEDED:
        return started.succeed({"n": n})
    if state is OperationState.AMBIGUOUS:
        return started.mark_ambiguous()
    return started


def test_a_put_leaves_the_journal_it_was_made_from_as_it_was() -> None:
    first = Journal([entry(0)])
    second = first.put(1, entry(1))
    third = second.put(0, entry(0, OperationState.SUCCEEDED))
    assert first == [entry(0)] and len(first) == 1
    assert second == [entry(0), entry(1)]
    assert third == [entry(0, OperationState.SUCCEEDED), entry(1)]
    assert first[0] is not third[0] and second[0] == entry(0)
    assert [first.position("op-1"), second.position("op-1"), third.position("op-1")] == [
        None,
        1,
        1,
    ]
    assert first.find("op-0") == entry(0) and third.find("op-0") == third[0]


def test_random_puts_on_random_versions_match_copied_lists() -> None:
    rng = random.Random(17)
    versions: list[tuple[Journal, list[OperationJournalEntry]]] = [(Journal(), [])]
    for n in range(3_000):
        journal, model = (
            versions[rng.randrange(len(versions))] if rng.random() < 0.2 else (versions[-1])
        )
        if model and rng.random() < 0.5:
            index = rng.randrange(len(model))
            new_entry = entry(int(model[index].operation_id[3:]), rng.choice(list(_STATES)))
        else:
            index, new_entry = len(model), entry(n, rng.choice(list(_STATES)))
        made = journal.put(index, new_entry)
        changed = list(model)
        changed[index : index + 1] = [new_entry]
        versions.append((made, changed))
    for journal, model in rng.sample(versions, 300) + versions[-5:]:
        assert len(journal) == len(model)
        assert [journal[i] for i in range(len(model))] == model  # read one by one
        assert journal == model and list(journal) == model and journal[1:3] == model[1:3]
        assert journal.ambiguous == sum(e.state is OperationState.AMBIGUOUS for e in model)
        for position, item in enumerate(model[:20]):
            assert journal.position(item.operation_id) == position


_STATES = (OperationState.STARTED, OperationState.SUCCEEDED, OperationState.AMBIGUOUS)


def test_the_same_put_made_twice_is_one_journal_and_another_put_branches() -> None:
    base = Journal([entry(0), entry(1)])
    receipt = entry(1, OperationState.SUCCEEDED)
    view = base.put(1, receipt)
    assert base.put(1, receipt) is view  # the write planned after the view is the view
    branch = base.put(1, entry(1, OperationState.AMBIGUOUS))
    assert branch != view and base == [entry(0), entry(1)]
    assert view[1] is receipt and branch.ambiguous == 1 and view.ambiguous == 0


def test_a_lineage_of_writes_shares_one_list() -> None:
    journal = Journal()
    entries = journal._lineage.entries
    for n in range(1_000):
        journal = journal.put(n, entry(n))
        journal = journal.put(n, entry(n, OperationState.SUCCEEDED))
    assert journal._lineage.entries is entries and len(journal) == 1_000


def test_wrong_puts_are_refused() -> None:
    journal = Journal([entry(0)])
    with pytest.raises(ValueError, match="already"):
        journal.put(1, entry(0))
    with pytest.raises(ValueError, match="another call"):
        journal.put(0, entry(1))
    with pytest.raises(IndexError):
        journal.put(3, entry(3))
    with pytest.raises(IndexError):
        journal[1]
    assert journal[-1] == entry(0)


def test_a_journal_is_a_value() -> None:
    journal = Journal([entry(0)]).put(1, entry(1, OperationState.AMBIGUOUS))
    assert journal == [entry(0), entry(1, OperationState.AMBIGUOUS)] and journal != (entry(0),)
    assert [entry(0), entry(1, OperationState.AMBIGUOUS)] == journal
    assert pickle.loads(pickle.dumps(journal)) == journal
    assert copy.copy(journal) is journal and copy.deepcopy(journal) == journal
    assert repr(Journal([])) == "Journal([])" and not Journal() and journal
    assert ambiguous_in(journal) and ambiguous_in([entry(0, OperationState.AMBIGUOUS)])
    assert not ambiguous_in([entry(0)]) and journal_of(journal) is journal
    with pytest.raises(TypeError):
        hash(journal)


def test_a_plan_and_a_view_of_the_same_receipts_copy_nothing() -> None:
    """The lease's view (stored record + receipts) and the write planned from the
    stored record with the same receipts are one lineage: no journal is copied."""
    record = replace(
        make_record(), claim_token="owner-a", claimed_cycle=1, lease_expires_at_ms=1, revision=1
    )
    tool = [make_tool_entry("run-1", 1, n).start() for n in range(1, 4)]
    lease = Lease(MemoryCheckpointer(), record, 1_000, recovery=False)
    stored = plan_record_operations(lease.stored, [tool[0]], "owner-a").record
    lease.adopt(stored)
    lineage = stored.tool_journal._lineage  # type: ignore[attr-defined]
    for n in range(1, 3):
        lease.note(tool[n - 1].succeed({"n": n}))
        view = lease.record  # the step reads its view before the write
        written = plan_record_operations(lease.stored, [*lease._pending, tool[n]], "owner-a")
        assert view.tool_journal[n - 1] == written.record.tool_journal[n - 1]
        lease.adopt(written.record)
    assert lease.stored.tool_journal._lineage is lineage  # type: ignore[attr-defined]
    assert [e.state for e in lease.stored.tool_journal] == [
        OperationState.SUCCEEDED,
        OperationState.SUCCEEDED,
        OperationState.STARTED,
    ]
