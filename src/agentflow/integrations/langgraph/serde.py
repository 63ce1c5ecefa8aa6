"""LangGraph values to bytes and back, with no way to run stored code.

Encoding is LangGraph's own (``JsonPlusSerializer`` with the pickle fallback
off), so records copied from a stock saver and records written here are the
same bytes. Decoding is ours: a msgpack extension may only rebuild a type on
an explicit allowlist, and anything else raises
:class:`~agentflow.errors.CheckpointCorrupted` instead of importing a name
taken from the store. That closes, by construction:

- CVE-2026-28277 (GHSA-g48c-2wqr-h844): LangGraph's msgpack ``ext_hook``
  imports and calls any ``module.name`` found in a checkpoint unless
  ``LANGGRAPH_STRICT_MSGPACK`` is set (still opt-in in langgraph-checkpoint
  4.x, where a blocked type silently comes back as its raw arguments);
- CVE-2025-64439 (GHSA-wwqv-p2pp-99h5): the ``"json"`` mode's
  ``lc: 2`` constructor records; a ``"json"`` record is decoded as plain JSON
  here and refused if it holds a LangChain constructor envelope;
- CVE-2026-27794 (GHSA-mhr3-j7m5-c7c9) and every other pickle path: there is
  no pickle fallback on either side, and a ``"pickle"`` record is refused;
- CVE-2025-68664 (GHSA-c67j-w6g6-q2cm): LangChain's ``load()`` is never
  called, so an ``lc`` dictionary in state stays a dictionary.

The allowlist grows only by name: ``allowed=`` at construction, or the types
LangGraph derives from a compiled graph's state schema and hands to
:meth:`StrictSerializer.with_allowlist`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any, Final

import orjson
import ormsgpack
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from agentflow.errors import CheckpointCorrupted, CheckpointNotSerializable

__all__ = ["DEFAULT_ALLOWED", "StrictSerializer"]

#: Data-only types a checkpoint may rebuild without being told: standard
#: library values, LangChain messages and documents, LangGraph's own types.
DEFAULT_ALLOWED: Final[frozenset[tuple[str, str]]] = frozenset(
    {
        *(("datetime", name) for name in ("datetime", "date", "time", "timedelta", "timezone")),
        ("uuid", "UUID"),
        ("decimal", "Decimal"),
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("collections", "deque"),
        *(
            ("ipaddress", f"IPv{v}{kind}")
            for v in (4, 6)
            for kind in ("Address", "Interface", "Network")
        ),
        *(
            (module, name)
            for module in ("pathlib", "pathlib._local")
            for name in ("Path", "PosixPath", "WindowsPath")
        ),
        ("zoneinfo", "ZoneInfo"),
        *(
            (f"langchain_core.messages.{module}", f"{name}{chunk}")
            for module, name in (
                ("base", "BaseMessage"),
                ("human", "HumanMessage"),
                ("ai", "AIMessage"),
                ("system", "SystemMessage"),
                ("chat", "ChatMessage"),
                ("tool", "ToolMessage"),
                ("function", "FunctionMessage"),
            )
            for chunk in ("", "Chunk")
        ),
        ("langchain_core.messages.modifier", "RemoveMessage"),
        ("langchain_core.documents.base", "Document"),
        *(("langgraph.types", name) for name in ("Send", "Interrupt", "Command", "Overwrite")),
    }
)
#: The one method call a record may make: how LangGraph stores a datetime.
_ALLOWED_METHODS: Final = frozenset({("datetime", "datetime", "fromisoformat")})

# LangGraph's msgpack extension codes (its wire format).
_EXT_SINGLE_ARG, _EXT_POS_ARGS, _EXT_KW_ARGS, _EXT_METHOD = 0, 1, 2, 3
_EXT_PYDANTIC_V1, _EXT_PYDANTIC_V2, _EXT_NUMPY, _EXT_DELTA = 4, 5, 6, 7
_UNPACK_OPTIONS: Final = ormsgpack.OPT_NON_STR_KEYS


def _type_key(item: tuple[str, ...] | type) -> tuple[str, str]:
    if isinstance(item, type):
        return (item.__module__, item.__name__)
    if isinstance(item, tuple) and len(item) >= 2 and all(isinstance(p, str) for p in item):
        # LangGraph's schema walk may name a nested type with more parts.
        return (".".join(item[:-1]), item[-1])
    raise TypeError(f"an allowlist entry is a class or a (module, name) tuple, not {item!r}")


class StrictSerializer:
    """LangGraph's ``SerializerProtocol`` with allowlisted decoding only.

    ``dumps_typed`` raises :class:`~agentflow.errors.CheckpointNotSerializable`
    for a value LangGraph's encoder cannot handle (no pickle). ``loads_typed``
    raises :class:`~agentflow.errors.CheckpointCorrupted` for a type that is
    not allowed, an unknown record type or extension code, or bytes that do not
    decode, and never returns a stand-in value.
    """

    def __init__(self, *, allowed: Iterable[tuple[str, ...] | type] = ()) -> None:
        self._allowed = DEFAULT_ALLOWED | {_type_key(item) for item in allowed}
        self._encoder = JsonPlusSerializer(pickle_fallback=False, allowed_msgpack_modules=None)

    @property
    def allowed(self) -> frozenset[tuple[str, str]]:
        """The (module, name) pairs a record may rebuild."""
        return frozenset(self._allowed)

    def with_allowlist(self, extra: Iterable[tuple[str, ...] | type]) -> StrictSerializer:
        """A serializer that also allows ``extra`` (self when nothing is new)."""
        added = {_type_key(item) for item in extra} - self._allowed
        if not added:
            return self
        clone = StrictSerializer()
        clone._allowed = self._allowed | added
        return clone

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        try:
            return self._encoder.dumps_typed(obj)
        except (TypeError, ValueError, ormsgpack.MsgpackEncodeError) as exc:
            raise CheckpointNotSerializable(
                f"a {type(obj).__name__} value cannot be stored: {exc}"
            ) from exc

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        kind, blob = data
        if kind == "null":
            return None
        if kind == "bytes":
            return bytes(blob)
        if kind == "bytearray":
            return bytearray(blob)
        if kind == "msgpack":
            return _Decoder(self._allowed).decode(blob)
        if kind == "json":
            return _plain_json(blob)
        raise CheckpointCorrupted(f"stored LangGraph value of type {kind!r} is refused")


class _Decoder:
    """One decode: ormsgpack drops an ext hook's exception, so the hook keeps it."""

    __slots__ = ("allowed", "failure")

    def __init__(self, allowed: frozenset[tuple[str, str]]) -> None:
        self.allowed = allowed
        self.failure: CheckpointCorrupted | None = None

    def decode(self, blob: bytes) -> Any:
        try:
            return self._unpack(blob)
        except (ValueError, TypeError, ormsgpack.MsgpackDecodeError) as exc:
            if self.failure is not None:
                raise self.failure from None
            raise CheckpointCorrupted(f"a stored LangGraph value does not decode: {exc}") from exc

    def _unpack(self, blob: bytes) -> Any:
        return ormsgpack.unpackb(blob, ext_hook=self._ext_hook, option=_UNPACK_OPTIONS)

    def _ext_hook(self, code: int, data: bytes) -> Any:
        try:
            return self._extension(code, data)
        except CheckpointCorrupted as exc:
            self.failure = self.failure or exc
            raise

    def _class(self, module: object, name: object) -> Any:
        if (module, name) not in self.allowed:
            raise CheckpointCorrupted(
                f"stored type {module}.{name} is not on the allowlist; if it is yours, "
                f"pass allowed=[({module!r}, {name!r})] to AgentflowSaver"
            )
        assert isinstance(module, str) and isinstance(name, str)
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as exc:
            raise CheckpointCorrupted(f"stored type {module}.{name} cannot be found") from exc

    def _extension(self, code: int, data: bytes) -> Any:
        if code == _EXT_DELTA:
            return _DeltaSnapshot(self._unpack(data))
        if code == _EXT_NUMPY:
            return _numpy_array(self._unpack(data))
        parts = self._unpack(data)
        if not isinstance(parts, list | tuple) or len(parts) < 3:
            raise CheckpointCorrupted(f"a stored extension value (code {code}) is malformed")
        module, name, args = parts[0], parts[1], parts[2]
        if code == _EXT_METHOD:
            method = parts[3] if len(parts) > 3 else None
            if (module, name, method) not in _ALLOWED_METHODS:
                raise CheckpointCorrupted(f"stored call {module}.{name}.{method} is refused")
            return _build(getattr(self._class(module, name), str(method)), args)
        cls = self._class(module, name)
        if code == _EXT_SINGLE_ARG:
            return _build(cls, args)
        if code == _EXT_POS_ARGS and isinstance(args, list | tuple):
            return _build(cls, *args)
        if code in (_EXT_KW_ARGS, _EXT_PYDANTIC_V1, _EXT_PYDANTIC_V2) and isinstance(args, dict):
            return _model(cls, code, args)
        raise CheckpointCorrupted(f"a stored extension value (code {code}) is malformed")


def _build(factory: Callable[..., Any], *args: Any) -> Any:
    try:
        return factory(*args)
    except (TypeError, ValueError, KeyError) as exc:
        raise CheckpointCorrupted(
            f"a stored {getattr(factory, '__name__', factory)} does not rebuild"
        ) from exc


def _model(cls: Any, code: int, kwargs: dict[str, Any]) -> Any:
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        # A model stored from ``model_construct`` need not validate; the class
        # is allowlisted, so building it unvalidated is what LangGraph does too.
        construct = getattr(
            cls, "model_construct" if code == _EXT_PYDANTIC_V2 else "construct", None
        )
        if code == _EXT_KW_ARGS or construct is None:
            raise CheckpointCorrupted(f"a stored {cls.__name__} does not rebuild") from exc
        return construct(**kwargs)


def _numpy_array(meta: Any) -> Any:
    try:
        np = importlib.import_module("numpy")  # optional: only a state holding arrays needs it
        dtype, shape, order, buffer = meta
        kind = np.dtype(dtype)
        if kind.hasobject:
            raise ValueError("object arrays are refused")
        return np.frombuffer(buffer, dtype=kind).reshape(shape, order=order)
    except (ImportError, TypeError, ValueError) as exc:
        raise CheckpointCorrupted("a stored numpy array does not decode") from exc


def _plain_json(blob: bytes) -> Any:
    """A legacy ``"json"`` record as data, refused if it asks to build an object."""
    try:
        value = orjson.loads(blob)
    except orjson.JSONDecodeError as exc:
        raise CheckpointCorrupted("a stored LangGraph json value does not decode") from exc
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if "lc" in item and item.get("type") in ("constructor", "secret"):
                raise CheckpointCorrupted(
                    "a stored LangGraph json value holds a LangChain constructor, which is refused"
                )
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return value
