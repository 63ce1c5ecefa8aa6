"""``python -m agentflow``: the ``agentflow`` command."""

from agentflow.cli.app import main

main()
