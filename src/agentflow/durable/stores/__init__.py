"""Native durable stores, one module per backend beside its checkpointer."""
