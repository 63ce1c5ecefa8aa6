"""The wire of seed 004: RFC 8785 canonical JSON, the digests and ids derived from it,
JSON pointers and the value checks every record field goes through."""
