"""The ``agentflow`` command: the demo and a control plane for runs."""

from __future__ import annotations

from agentflow.cli.app import main

__all__ = ["main"]
