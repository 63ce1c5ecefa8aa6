from __future__ import annotations

from typing import Any

import pytest

from agentflow.durable import (
    CheckpointExtension,
    DurableError,
    ExtensionIdentity,
    ExtensionStateEntry,
    extension_identity,
    restore_extensions,
    snapshot_extensions,
    validate_extension_state_size,
)


class Audit:
    def __init__(self, namespace: str = "com.example.audit", version: str = "1") -> None:
        self.namespace = namespace
        self.version = version
        self.required = False
        self.state: Any = {"seen": 1}
        self.restored: list[Any] = []

    def snapshot(self) -> Any:
        return self.state

    def restore(self, state: Any) -> None:
        self.restored.append(state)


def test_entry_sizes_are_canonical_bytes_without_the_namespace() -> None:
    # {"required":false,"state":"<n x>","version":"1"} is 43 bytes plus n.
    assert validate_extension_state_size({"a.b": ExtensionStateEntry("1", False, "")}) == 43
    exact = {"a.b": ExtensionStateEntry("1", False, "x" * (65_536 - 43))}
    assert validate_extension_state_size(exact) == 65_536
    with pytest.raises(DurableError) as entry:
        validate_extension_state_size({"a.b": ExtensionStateEntry("1", False, "x" * 65_494)})
    two = {f"a.b{i}": ExtensionStateEntry("1", False, "é" * 100) for i in range(2)}
    with pytest.raises(DurableError) as total:
        validate_extension_state_size(two, max_total=2 * 243 - 1)
    assert validate_extension_state_size(two, max_total=2 * 243) == 486
    assert entry.value.code == "checkpoint_extension_entry_too_large"
    assert total.value.code == "checkpoint_extension_state_too_large"


def test_snapshot_keeps_unknown_entries_and_marks_required() -> None:
    foreign = ExtensionStateEntry("3", False, ["opaque"])
    snapshot = snapshot_extensions(
        [Audit()], {"org.other.x": foreign}, required_namespaces=["com.example.audit"]
    )
    assert snapshot == {
        "com.example.audit": ExtensionStateEntry("1", True, {"seen": 1}),
        "org.other.x": foreign,
    }


def test_snapshot_refusals() -> None:
    with pytest.raises(DurableError) as duplicate:
        snapshot_extensions([Audit(), Audit()], {})
    big = Audit()
    big.state = "x" * 70_000
    with pytest.raises(DurableError) as too_big:
        snapshot_extensions([big], {})
    bad = Audit(namespace="NoDots")
    with pytest.raises(DurableError) as name:
        snapshot_extensions([bad], {})
    assert duplicate.value.code == "checkpoint_extension_namespace_duplicate"
    assert too_big.value.code == "checkpoint_extension_entry_too_large"
    assert name.value.code == "checkpoint_extension_namespace_invalid"


def test_restore_hands_back_state_and_blocks_what_is_missing() -> None:
    audit = Audit()
    stored = {
        "com.example.audit": ExtensionStateEntry("1", True, {"seen": 4}),
        "org.other.optional": ExtensionStateEntry("1", False, None),
    }
    restore_extensions([audit], stored)
    assert audit.restored == [{"seen": 4}]
    cases = [
        ([], stored, [], "checkpoint_required_extension_unavailable"),
        ([Audit(version="2")], stored, [], "checkpoint_extension_version_mismatch"),
        ([Audit()], stored, ["com.example.absent"], "checkpoint_extension_missing"),
    ]
    for extensions, entries, required, code in cases:
        with pytest.raises(DurableError) as caught:
            restore_extensions(extensions, entries, required_namespaces=required)
        assert caught.value.code == code


def test_entry_wire_form() -> None:
    entry = ExtensionStateEntry("1", True, {"k": [1]})
    assert ExtensionStateEntry.from_dict(entry.to_dict()) == entry
    bad: object
    for bad in ({"version": " ", "required": True, "state": 1}, {"version": "1", "state": 1}, []):
        with pytest.raises(DurableError) as caught:
            ExtensionStateEntry.from_dict(bad)
        assert caught.value.code == "checkpoint_extension_state_invalid"


class MethodAudit:
    """An extension written as the original's trait: namespace(), version(), required()."""

    def __init__(self) -> None:
        self.restored: list[Any] = []

    def namespace(self) -> str:
        return "com.example.methods"

    def version(self) -> str:
        return "2"

    def required(self) -> bool:
        return True

    def snapshot(self) -> Any:
        return {"n": 1}

    def restore(self, state: Any) -> None:
        self.restored.append(state)


def test_an_extension_written_with_methods_works_everywhere() -> None:
    extension = MethodAudit()
    assert isinstance(extension, CheckpointExtension)
    assert extension_identity(extension) == ExtensionIdentity("com.example.methods", "2", True)
    snapshot = snapshot_extensions([extension], {})
    assert snapshot == {"com.example.methods": ExtensionStateEntry("2", True, {"n": 1})}
    restore_extensions([extension], snapshot)
    assert extension.restored == [{"n": 1}]


def test_a_malformed_extension_is_refused_at_registration_naming_the_member() -> None:
    def with_member(name: str, value: Any) -> Any:
        extension = Audit()
        setattr(extension, name, value)
        return extension

    cases = [
        (with_member("namespace", 7), "checkpoint_extension_invalid", "namespace must be a str"),
        (with_member("version", lambda: 2), "checkpoint_extension_invalid", "version must be"),
        (with_member("required", "yes"), "checkpoint_extension_invalid", "required must be"),
        (with_member("version", " "), "checkpoint_extension_version_invalid", "empty version"),
        (with_member("snapshot", None), "checkpoint_extension_invalid", "snapshot()"),
        (with_member("namespace", "NoDots"), "checkpoint_extension_namespace_invalid", ""),
        (object(), "checkpoint_extension_invalid", "it has no namespace"),
    ]
    for extension, code, words in cases:
        with pytest.raises(DurableError) as caught:
            snapshot_extensions([extension], {})
        assert caught.value.code == code and words in caught.value.message
