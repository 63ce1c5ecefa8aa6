#!/usr/bin/env bash
# LangGraph's own graph tests, in a quick form, against AgentflowSaver on SQLite and
# PostgreSQL, with LANGGRAPH_STRICT_MSGPACK off and on. The suite comes from the
# installed langgraph release's sdist, downloaded from the package index into a
# scratch folder (never into the repository); the stock SQLite saver is run on any
# test ours fails, and a failure the stock saver does not share fails this script.
#
#   .ci/langgraph_suite.sh            # needs PostgreSQL (AGENTFLOW_POSTGRES_DSN)
#
# The full run (19 files, stock savers beside ours, both modes) and its tables are
# `python -m benchmarks.framework_suites langgraph`; see docs/langgraph.md.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
"${VENV:-.venv}/bin/python" -m benchmarks.framework_suites langgraph --quick --strict both
