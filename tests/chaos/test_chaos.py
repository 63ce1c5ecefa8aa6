"""The chaos harness in quick mode: a few kills per backend (the full run is
``python -m tests.chaos``; AGENTFLOW_CHAOS_KILLS sets the kills here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.chaos.harness import Settings, chaos
from tests.runtime.shared_stores import PROCESS_BACKENDS, on_process_backends

KILLS = int(os.environ.get("AGENTFLOW_CHAOS_KILLS", "4"))


@pytest.mark.slow
@on_process_backends
@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
async def test_runs_killed_at_random_moments_charge_once_and_all_finish(
    backend: str, tmp_path: Path
) -> None:
    figures = await chaos(Settings(backend, KILLS, seed=KILLS), tmp_path)
    assert figures.violations == []
    assert figures.kills == KILLS
    assert figures.runs > 0 and figures.done == figures.runs and figures.lost == 0
    assert figures.duplicates == 0
    assert figures.effects == 2 * figures.runs  # charge and email, once per run
    assert figures.idempotent_landed == figures.runs <= figures.idempotent_calls
    assert figures.events >= figures.runs + 3 * figures.surfaced  # and none missing
