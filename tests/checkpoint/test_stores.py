"""open_store: one registry of URL schemes, clear errors for the rest."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agentflow.checkpoint import Checkpoint, Checkpointer, MemoryCheckpointer, open_store
from agentflow.checkpoint.codec import JsonCodec, RecordKey
from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.checkpoint.stores import register_scheme, safe_url
from agentflow.errors import InvalidStoreUrl


async def test_memory_urls_share_one_store_per_name() -> None:
    async with (
        open_store("memory://docs-a", namespace="n") as a,
        open_store("memory://docs-a", namespace="n") as b,
    ):
        await a.put(Checkpoint(thread="t", step=0, state={}))
        assert await b.get("t") is not None
    async with open_store("memory://docs-b", namespace="n") as other:
        assert await other.get("t") is None


async def test_sqlite_urls_are_relative_or_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    relative = open_store("sqlite:///runs/rel.db")
    absolute = open_store(f"sqlite:///{tmp_path}/abs.db")
    assert isinstance(relative, SqliteCheckpointer) and isinstance(absolute, SqliteCheckpointer)
    assert relative.path == Path("runs/rel.db")
    assert absolute.path == tmp_path / "abs.db"
    await relative.close()
    await absolute.close()


@pytest.mark.parametrize(
    "url", ["", "nothing", "ftp://host/x", "sqlite://", "sqlite:///", 7], ids=repr
)
def test_bad_urls_are_refused(url: object) -> None:
    with pytest.raises(InvalidStoreUrl):
        open_store(url)  # type: ignore[arg-type]


def test_a_missing_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "asyncpg", None)
    for name in [m for m in sys.modules if m.startswith("agentflow.checkpoint.postgres")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(InvalidStoreUrl, match=r"pip install 'agentflow-durable\[postgres\]'"):
        open_store("postgresql://u:secret@127.0.0.1/db")


def test_passwords_never_show() -> None:
    assert safe_url("postgresql://u:secret@h:5/db") == "postgresql://u@h:5/db"
    assert safe_url("sqlite:///x.db") == "sqlite:///x.db"
    with pytest.raises(InvalidStoreUrl) as info:
        open_store("nope://u:secret@h/db")
    assert "secret" not in str(info.value)


async def test_a_registered_scheme_opens_through_open_store() -> None:
    opened: list[str] = []

    def opener(url: str, *, namespace: str | None = None) -> Checkpointer:
        opened.append(url)
        return MemoryCheckpointer(namespace=namespace)

    register_scheme("mine+test", opener)
    async with open_store("mine+test://x", namespace="n") as cp:
        assert isinstance(cp, MemoryCheckpointer) and cp.namespace == "n"
    assert opened == ["mine+test://x"]
    with pytest.raises(InvalidStoreUrl):
        register_scheme("Bad Scheme", opener)


async def test_a_codec_given_to_open_store_encodes_every_record() -> None:
    class CountingCodec(JsonCodec):
        __slots__ = ("encoded",)

        def __init__(self) -> None:
            self.encoded = 0

        def encode(self, cp: Checkpoint, key: RecordKey) -> bytes:
            self.encoded += 1
            return super().encode(cp, key)

    codec = CountingCodec()
    async with open_store("memory://codec", codec=codec) as cp:
        await cp.put(Checkpoint(thread="t", step=0, state={}))
    assert codec.encoded == 1
