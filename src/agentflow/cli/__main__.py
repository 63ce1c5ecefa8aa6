"""``python -m agentflow.cli``: the ``agentflow`` command."""

from agentflow.cli.app import main

main()
