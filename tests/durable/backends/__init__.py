"""One module per durable backend, each with an async ``harness(tmp_path)`` context manager.

The durable conformance suite runs over every module here, so a new backend
joins it by adding one file.
"""
