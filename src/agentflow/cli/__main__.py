"""``python -m agentflow.cli``."""

from agentflow.cli.app import main

main()
