"""The chaos harness: runs under random SIGKILL on every backend, judged from a ledger."""
