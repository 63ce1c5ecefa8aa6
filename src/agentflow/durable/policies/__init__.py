"""What is decided about a run: admission of a record, reconciliation of ambiguous
calls, the original's definitive failures, and the producer stability rules."""
