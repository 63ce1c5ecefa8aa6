"""Run the benchmarks and print their tables as Markdown.

python -m benchmarks            # every bench_*.py
python -m benchmarks sqlite     # only bench_sqlite.py
python -m benchmarks --quick    # smaller workloads, for a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import platform
import sys
from pathlib import Path

from benchmarks.common import Table

#: The extra that holds every contestant (the LangGraph savers and their drivers).
_INSTALL = "pip install -e '.[all,benchmark]'"
#: Packages of this repository: a missing module of theirs is a bug, not an extra.
_OURS = frozenset({"agentflow", "benchmarks", "tests"})


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("names", nargs="*", help="benchmark names (bench_NAME.py); default all")
    parser.add_argument("--quick", action="store_true", help="small workloads for a smoke run")
    args = parser.parse_args()
    available = sorted(p.stem[6:] for p in Path(__file__).parent.glob("bench_*.py"))
    names = args.names or available
    unknown = set(names) - set(available)
    if unknown:
        parser.error(f"unknown benchmark(s) {sorted(unknown)}; available: {available}")
    print(f"# agentflow benchmarks ({platform.python_version()}, {platform.machine()})\n")
    for name in names:
        try:
            module = importlib.import_module(f"benchmarks.bench_{name}")
            tables: list[Table] = asyncio.run(module.run(args.quick))
        except ModuleNotFoundError as missing:  # a contestant's package, not ours
            if missing.name is None or missing.name.split(".")[0] in _OURS:
                raise
            sys.exit(f"benchmark {name} needs {missing.name}: {_INSTALL}")
        for table in tables:
            print(table.markdown())
            sys.stdout.flush()


if __name__ == "__main__":
    main()
