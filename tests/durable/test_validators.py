from __future__ import annotations

import pytest

from agentflow.durable import (
    CapabilityRef,
    DurableError,
    resolve_json_pointer,
    set_json_pointer,
    validate_capability_slot,
    validate_checkpoint_key,
    validate_extension_namespace,
    validate_pointer,
    validate_sha256,
)
from agentflow.durable.wire.validators import is_blank


def test_blank_follows_rust_white_space() -> None:
    assert is_blank(" \t\u3000\u2028")
    assert not is_blank("\x1c")  # Python's strip() would strip it; Rust's trim() keeps it


def test_checkpoint_keys() -> None:
    assert validate_checkpoint_key("研" * 170) == "研" * 170
    for bad in ("", "\u2003", "x" * 513, "é" * 257, "a\x00b", "\udc00", 7):
        with pytest.raises(DurableError) as caught:
            validate_checkpoint_key(bad)
        assert caught.value.code == "checkpoint_key_invalid"


def test_extension_namespaces() -> None:
    for good in ("com.example.audit", "0a.b", "a._-"):
        assert validate_extension_namespace(good) == good
    for bad in ("", "Com.example", "noperiod", ".a.b", "a b.c", "é.x", "a." + "b" * 127):
        with pytest.raises(DurableError) as caught:
            validate_extension_namespace(bad)
        assert caught.value.code == "checkpoint_extension_namespace_invalid"


def test_digests_slots_and_refs() -> None:
    assert validate_sha256("a" * 64, "d") == "a" * 64
    for bad in ("A" * 64, "a" * 63, "g" * 64):
        with pytest.raises(DurableError) as caught:
            validate_sha256(bad, "d")
        assert caught.value.code == "checkpoint_digest_invalid"
    assert validate_capability_slot("runtime_hook:0") == "runtime_hook:0"
    for slot in ("", "0hook", "Hook", "a b"):
        with pytest.raises(DurableError):
            validate_capability_slot(slot)
    assert CapabilityRef.from_dict({"id": "x", "version": "1"}) == CapabilityRef("x", "1")
    for ref in ({"id": "x"}, {"id": " ", "version": "1"}, {"id": "x", "version": 1}):
        with pytest.raises(DurableError) as caught:
            CapabilityRef.from_dict(ref)
        assert caught.value.code == "checkpoint_capability_ref_invalid"


def test_json_pointers() -> None:
    doc = {"a/b~c": {"list": [10, 20]}, "": 1}
    assert resolve_json_pointer(doc, "/a~1b~0c/list/1") == 20
    assert resolve_json_pointer(doc, "/a~1b~0c/list/+01") == 20  # the original's usize parse
    assert resolve_json_pointer(doc, "/") == 1
    assert resolve_json_pointer(doc, "") is doc
    assert set_json_pointer(doc, "/a~1b~0c/list/0", "x")["a/b~c"]["list"] == ["x", 20]
    assert set_json_pointer(doc, "", 5) == 5
    for bad in ("a", "/x~2", "/x~"):
        with pytest.raises(DurableError) as caught:
            validate_pointer(bad)
        assert caught.value.code == "checkpoint_credential_slots_invalid"
    for missing in ("/nope", "/a~1b~0c/list/2", "/a~1b~0c/list/-1", "/a~1b~0c/list/x/y"):
        with pytest.raises(DurableError) as caught:
            resolve_json_pointer(doc, missing)
        assert caught.value.code == "checkpoint_credential_slot_unresolved"
    with pytest.raises(DurableError):
        set_json_pointer(doc, "/new", 1)
