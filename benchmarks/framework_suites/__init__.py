"""The frameworks' own test suites, run against agentflow's adapters.

``python -m benchmarks.framework_suites langgraph`` runs LangGraph's graph
tests (from the installed release's source distribution, unpacked in a
scratch folder) against the stock savers and against ``AgentflowSaver``;
``python -m benchmarks.framework_suites agent-framework`` runs Agent
Framework's workflow tests (from a scratch checkout of the installed
release's tag) against its built-in storages and against ours. Both print,
per saver or storage, how many tests passed and failed, and every test id
whose outcome differs from the stock one. Nothing fetched is kept in this
repository: the pytest plugins here are what points the fetched suites at
our code.
"""
