"""Other frameworks' checkpoint interfaces over any agentflow backend.

Each adapter lives in its own subpackage and imports its framework only there,
so ``import agentflow`` needs none of them: :mod:`agentflow.integrations.langgraph`
(``AgentflowSaver``) needs ``pip install 'agentflow-durable[langgraph]'``, and
:mod:`agentflow.integrations.agent_framework` (``AgentflowCheckpointStorage``)
needs ``pip install 'agentflow-durable[agent-framework]'``.
"""
