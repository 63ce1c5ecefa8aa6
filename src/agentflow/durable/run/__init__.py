"""A run's durable record and what it holds: the record (v2, and v1 with its
migration), the journal of external calls, the outbox of accepted-once events,
extension state, the run definition and its credential slots."""
