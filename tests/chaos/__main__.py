"""``python -m tests.chaos [--backend NAME ...] [--kills N]``: the chaos harness in full.

Runs one session per backend (100 kills each by default), prints the figures
and the kill sites as tables, and exits 1 if any promise was broken.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections import Counter
from pathlib import Path

from tests.chaos.harness import Figures, Settings, chaos
from tests.runtime.shared_stores import ALL_PROCESS_BACKENDS, PROCESS_BACKENDS

_COLUMNS = (
    ("backend", "backend"),
    ("kills", "kills"),
    ("runs", "runs"),
    ("done", "done"),
    ("effects", "non-idem effects"),
    ("duplicates", "duplicates"),
    ("surfaced", "ambiguous surfaced"),
    ("retried", "operator retry"),
    ("replayed", "operator replay"),
    ("raced", "operator raced"),
    ("idempotent_calls", "idem calls"),
    ("idempotent_landed", "idem landed"),
    ("model_calls", "model calls"),
    ("lost", "lost"),
    ("events", "events"),
    ("events_pending", "events left pending"),
    ("seconds", "wall s"),
)


def _cell(value: object) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def table(results: list[Figures]) -> str:
    """The figures (one row per backend) and where the kills landed, as Markdown."""
    lines = [
        "| " + " | ".join(title for _, title in _COLUMNS) + " |",
        "|" + "---|" * len(_COLUMNS),
    ]
    for figures in results:
        cells = [_cell(getattr(figures, name)) for name, _ in _COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    sites: Counter[str] = Counter()
    for figures in results:
        sites.update(figures.sites)
    lines += ["", "| killed | times |", "|---|---:|"]
    lines += [f"| {site} | {count} |" for site, count in sorted(sites.items())]
    return "\n".join(lines)


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--backend", action="append", choices=ALL_PROCESS_BACKENDS)
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--lease", type=float, default=1.5, help="claim_ttl in seconds")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    results: list[Figures] = []
    for backend in args.backend or PROCESS_BACKENDS:
        settings = Settings(
            backend, args.kills, workers=args.workers, lease=args.lease, seed=args.seed
        )
        with tempfile.TemporaryDirectory(prefix=f"chaos-{backend}-") as workdir:
            figures = await chaos(settings, Path(workdir))
        results.append(figures)
        for violation in figures.violations:
            print(f"{backend}: {violation}", file=sys.stderr)
        print(f"{backend}: done in {figures.seconds:.1f} s", file=sys.stderr)
    print(table(results))
    return 1 if any(figures.violations for figures in results) else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
