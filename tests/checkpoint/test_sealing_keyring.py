"""The key ring: where keys come from, what a spec may say, and that keys never leak."""

from __future__ import annotations

import base64
import functools
import logging
import pickle
import subprocess
import sys
import traceback
from pathlib import Path

import orjson
import pytest

from agentflow.checkpoint import MemoryCheckpointer, MemoryStore
from agentflow.checkpoint.sealing import KEY_BYTES, KeyRing, SealedCodec, new_key
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.errors import CheckpointCorrupted, InvalidArgument

OLD, NEW = new_key(), new_key()


def _spec(**fields: object) -> str:
    spec: dict[str, object] = {"current": "k2", "keys": {"k1": OLD, "k2": NEW}}
    spec.update(fields)
    return orjson.dumps(spec).decode()


def _forms(key: str) -> list[str]:
    """Every spelling of a key that must never appear anywhere."""
    raw = base64.b64decode(key)
    return [
        key,
        key.rstrip("="),
        raw.hex(),
        repr(raw)[2:-1],
        base64.urlsafe_b64encode(raw).decode(),
    ]


def _leaks(text: str) -> list[str]:
    return [form for key in (OLD, NEW) for form in _forms(key) if form in text]


def test_new_keys_are_random_32_byte_base64() -> None:
    assert new_key() != new_key()
    assert len(base64.b64decode(new_key(), validate=True)) == KEY_BYTES


def test_from_env_from_file_and_from_a_callable(tmp_path: Path) -> None:
    by_env = KeyRing.from_env("MY_KEYS", environ={"MY_KEYS": _spec(retired=["k1"])})
    path = tmp_path / "keys.json"
    path.write_text(_spec())
    path.chmod(0o600)
    by_file = KeyRing.from_file(path)
    by_source = KeyRing.from_source(lambda: {"current": "k1", "keys": {"k1": OLD}})
    assert (by_env.current, by_env.key_ids) == ("k2", ("k1", "k2"))
    assert by_env.retired == {"k1"}
    assert (by_file.current, by_file.retired) == ("k2", frozenset())
    assert by_source.key_ids == ("k1",)
    direct = KeyRing({"a": base64.b64decode(OLD)}, current="a")
    assert direct.current == "a"


def test_url_safe_and_unpadded_keys_are_read() -> None:
    raw = base64.b64decode(OLD)
    text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    assert KeyRing.from_source(lambda: {"current": "k", "keys": {"k": text}}).current == "k"


async def test_reload_rotates_without_a_restart() -> None:
    specs = [_spec(current="k1"), _spec(current="k2", retired=["k1"])]
    ring = KeyRing.from_source(lambda: specs[0])
    codec = SealedCodec(ring)
    async with MemoryCheckpointer(codec=codec) as cp:
        await cp.put(make_checkpoint("t", 0))
        specs.pop(0)
        ring.reload()
        await cp.put(make_checkpoint("t", 1))
        assert ring.current == "k2" and ring.retired == {"k1"}
        assert [c.step async for c in cp.history("t")] == [0, 1]
    with pytest.raises(InvalidArgument, match="no source"):
        KeyRing({"a": base64.b64decode(OLD)}, current="a").reload()


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("not json " + OLD, "not valid JSON"),
        ('["k1"]', "an object"),
        (_spec(extra=1), "no field 'extra'"),
        (_spec(current="k3"), "current key 'k3' is not in the ring"),
        (_spec(current=None), "'current' must be a key id"),
        (_spec(retired=["k2"]), "cannot be retired"),
        (_spec(retired=["k9"]), "retired key 'k9' is not in the ring"),
        (_spec(retired="k1"), "'retired' must be a list"),
        (_spec(keys=[OLD]), "'keys' must map"),
        (_spec(keys={}), "at least one key"),
        (_spec(keys={"k2": OLD[:-8]}), "base64 text of 32 bytes"),
        (_spec(keys={"k2": OLD + "AAAA"}), "base64 text of 32 bytes"),
        (_spec(keys={"k2": "*" * 44}), "base64 text of 32 bytes"),
        (_spec(keys={"k2": 7}), "base64 text of 32 bytes"),
        (_spec(keys={"bad id!": OLD}, current="bad id!"), "a key id is"),
        (_spec(keys={"x" * 65: OLD}), "a key id is"),
    ],
    ids=[f"case-{n}" for n in range(16)],  # a spec holds random keys: every process must agree
)
def test_bad_specs_are_refused_without_quoting_keys(spec: str, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match) as caught:
        KeyRing.from_source(lambda: spec)
    assert not _leaks(_rendered(caught.value))


def test_missing_sources_are_clear(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="AGENTFLOW_SEALING_KEYS holds no sealing keys"):
        KeyRing.from_env(environ={})
    with pytest.raises(InvalidArgument, match="cannot read sealing keys from"):
        KeyRing.from_file(tmp_path / "absent.json")


def test_direct_keys_are_checked() -> None:
    with pytest.raises(InvalidArgument, match="must be 32 bytes"):
        KeyRing({"a": b"short"}, current="a")
    with pytest.raises(InvalidArgument, match="not one string"):
        KeyRing({"a": base64.b64decode(OLD)}, current="a", retired="a")


def _rendered(exc: BaseException) -> str:
    """The exception as a log would render it, with every chained cause and context."""
    parts = ["".join(traceback.format_exception(exc)), repr(exc)]
    seen: BaseException | None = exc
    while seen is not None:
        parts.append(repr(vars(seen)) if hasattr(seen, "__dict__") else "")
        parts.extend(repr(arg) for arg in seen.args)
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


async def test_keys_never_appear_in_reprs_errors_or_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    ring = KeyRing.from_env(environ={"AGENTFLOW_SEALING_KEYS": _spec(retired=["k1"])})
    old_ring = KeyRing.from_source(lambda: _spec(current="k1"))
    texts = [repr(ring), str(ring), repr(SealedCodec(ring)), repr(SealedCodec(ring).keyring)]
    store = MemoryStore()
    async with MemoryCheckpointer(store=store, codec=SealedCodec(old_ring)) as cp:
        await cp.put(make_checkpoint("t", 0))
        await cp.put(make_checkpoint("t", 1))
    errors: list[BaseException] = []
    async with MemoryCheckpointer(store=store, codec=SealedCodec(ring)) as cp:
        assert await cp.get("t", 0) is not None  # a retired key: read, and logged
        store.namespace("").threads["t"][1] = store.namespace("").threads["t"][0]
        with pytest.raises(CheckpointCorrupted) as moved:
            await cp.get("t", 1)
        errors.append(moved.value)
    only_new = KeyRing.from_source(lambda: {"current": "k2", "keys": {"k2": NEW}})
    async with MemoryCheckpointer(store=store, codec=SealedCodec(only_new)) as cp:
        with pytest.raises(CheckpointCorrupted, match="key id 'k1'") as unknown:
            await cp.get("t", 0)
        errors.append(unknown.value)
    for spec in ("{" + OLD, _spec(keys={"k2": OLD + "=="})):
        with pytest.raises(InvalidArgument) as bad:
            KeyRing.from_source(functools.partial(str, spec))
        errors.append(bad.value)
    texts += [_rendered(exc) for exc in errors]
    texts.append(caplog.text)
    assert "retired sealing key 'k1'" in caplog.text
    assert [leak for text in texts for leak in _leaks(text)] == []


def test_a_key_ring_cannot_be_pickled() -> None:
    ring = KeyRing.from_source(_spec)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(ring)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(SealedCodec(ring))


def test_without_cryptography_the_import_says_which_extra_to_install() -> None:
    code = (
        "import sys\n"
        "sys.modules['cryptography'] = None\n"
        "import agentflow.checkpoint\n"
        "try:\n"
        "    import agentflow.checkpoint.sealing\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "pip install 'agentflow-durable[sealing]'" in result.stdout


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o602])
def test_a_key_file_others_can_read_or_write_is_refused_naming_the_fix(
    tmp_path: Path, mode: int
) -> None:
    path = tmp_path / "shared keys.json"
    path.write_text(_spec())
    path.chmod(mode)
    with pytest.raises(InvalidArgument) as refused:
        KeyRing.from_file(path)
    assert f"(mode {mode:04o})" in str(refused.value)
    assert f"chmod 600 '{path}'" in str(refused.value)
    assert OLD not in str(refused.value) and NEW not in str(refused.value)
    path.chmod(0o600)
    ring = KeyRing.from_file(path)
    path.chmod(mode)  # a reload reads the file again, and checks it again
    with pytest.raises(InvalidArgument, match="chmod 600"):
        ring.reload()
