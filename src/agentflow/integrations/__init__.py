"""Other frameworks' checkpoint interfaces over any agentflow backend.

Each adapter lives in its own subpackage and imports its framework only there,
so ``import agentflow`` needs none of them: :mod:`agentflow.integrations.langgraph`
needs ``pip install 'agentflow[langgraph]'``.
"""
