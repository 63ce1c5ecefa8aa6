"""LangGraph values to bytes and back, with no way to run stored code.

Encoding is LangGraph's own (``JsonPlusSerializer`` with the pickle fallback
off), so records copied from a stock saver and records written here are the
same bytes. Decoding is ours: a msgpack extension may only rebuild a type
the application vouches for (:mod:`~agentflow.integrations.langgraph.known_types`);
a value of any other type is never imported or called and reads back as the
data it was stored with, as LangGraph's stock savers give it. That closes,
by construction:

- CVE-2026-28277 (GHSA-g48c-2wqr-h844): LangGraph's msgpack ``ext_hook``
  imports and calls any ``module.name`` found in a checkpoint unless
  ``LANGGRAPH_STRICT_MSGPACK`` is set (still opt-in in langgraph-checkpoint
  4.x);
- CVE-2025-64439 (GHSA-wwqv-p2pp-99h5): the ``"json"`` mode's
  ``lc: 2`` constructor records; a ``"json"`` record is decoded as plain JSON
  here and refused if it holds a LangChain constructor envelope;
- CVE-2026-27794 (GHSA-mhr3-j7m5-c7c9) and every other pickle path: there is
  no pickle fallback on either side, and a ``"pickle"`` record is refused;
- CVE-2025-68664 (GHSA-c67j-w6g6-q2cm): LangChain's ``load()`` is never
  called, so an ``lc`` dictionary in state stays a dictionary.

Bytes that do not decode, a malformed extension and a stored record type
other than LangGraph's raise :class:`~agentflow.errors.CheckpointCorrupted`:
damage is never read as a value.
"""

from __future__ import annotations

import importlib
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Final

import orjson
import ormsgpack
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from agentflow.errors import CheckpointCorrupted, CheckpointNotSerializable
from agentflow.integrations.langgraph.known_types import KnownTypes, TypeKey
from agentflow.integrations.langgraph.schema_types import graph_types

__all__ = ["StrictSerializer"]

#: The one method call a record may make: how LangGraph stores a datetime.
_ALLOWED_METHODS: Final = frozenset({("datetime", "datetime", "fromisoformat")})

# LangGraph's msgpack extension codes (its wire format).
_EXT_SINGLE_ARG, _EXT_POS_ARGS, _EXT_KW_ARGS, _EXT_METHOD = 0, 1, 2, 3
_EXT_PYDANTIC_V1, _EXT_PYDANTIC_V2, _EXT_NUMPY, _EXT_DELTA = 4, 5, 6, 7
#: The codes whose payload starts with the (module, name) of a type.
_NAMED: Final = frozenset(
    {_EXT_SINGLE_ARG, _EXT_POS_ARGS, _EXT_KW_ARGS, _EXT_METHOD, _EXT_PYDANTIC_V1, _EXT_PYDANTIC_V2}
)
_UNPACK_OPTIONS: Final = ormsgpack.OPT_NON_STR_KEYS


class StrictSerializer:
    """LangGraph's ``SerializerProtocol``, rebuilding only known types.

    ``dumps_typed`` raises :class:`~agentflow.errors.CheckpointNotSerializable`
    for a value LangGraph's encoder cannot handle (no pickle), and reads its
    own output back once, building nothing, to learn the types it wrote.
    ``loads_typed`` rebuilds the types of :attr:`known` and gives every other
    value back as its stored data (logged once per type, counted in
    ``known.degraded``); it raises
    :class:`~agentflow.errors.CheckpointCorrupted` only for bytes that are
    damaged or of a record type LangGraph never writes here.
    """

    def __init__(
        self, *, allowed: Iterable[tuple[str, ...] | type] = (), known: KnownTypes | None = None
    ) -> None:
        self.known = known if known is not None else KnownTypes(allowed)
        if known is not None:
            known.allow(allowed)
        self._encoder = JsonPlusSerializer(pickle_fallback=False, allowed_msgpack_modules=None)
        self._graphs: weakref.WeakSet[Any] = weakref.WeakSet()

    @property
    def allowed(self) -> frozenset[TypeKey]:
        """The (module, name) pairs a record may rebuild now."""
        return self.known.names()

    def with_allowlist(self, extra: Iterable[tuple[str, ...] | type]) -> StrictSerializer:
        """This serializer, now also rebuilding ``extra`` (LangGraph passes a
        compiled graph's schema types in strict mode)."""
        self.known.allow(extra)
        return self

    def learn_graph(self, graph: Any) -> None:
        """Rebuild every class ``graph`` (and its subgraphs) names in its schemas
        (a graph is read once)."""
        if graph in self._graphs:
            return
        self.known.learn_classes(graph_types(graph))
        self._graphs.add(graph)

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        try:
            kind, blob = self._encoder.dumps_typed(obj)
        except (TypeError, ValueError, ormsgpack.MsgpackEncodeError) as exc:
            raise CheckpointNotSerializable(
                f"a {type(obj).__name__} value cannot be stored: {exc}"
            ) from exc
        if kind == "msgpack":
            self.known.learn_written(_written_types(blob, type(obj)))
        return kind, blob

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        kind, blob = data
        if kind == "null":
            return None
        if kind == "bytes":
            return bytes(blob)
        if kind == "bytearray":
            return bytearray(blob)
        if kind == "msgpack":
            return _Decoder(self.known).decode(blob)
        if kind == "json":
            return _plain_json(blob)
        raise CheckpointCorrupted(f"stored LangGraph value of type {kind!r} is refused")


def _written_types(blob: bytes, cls: type) -> list[TypeKey]:
    """The (module, name) of every typed value in bytes this process just encoded.

    Only names are read: nothing is built. Bytes LangGraph's encoder made that
    do not read back are a bug there, and fail the write here rather than the
    resume.
    """
    keys: list[TypeKey] = []

    def scan(code: int, data: bytes) -> None:
        parts = ormsgpack.unpackb(data, ext_hook=scan, option=_UNPACK_OPTIONS)
        if code in _NAMED and isinstance(parts, list | tuple) and len(parts) >= 2:
            module, name = parts[0], parts[1]
            if type(module) is str and type(name) is str:
                keys.append((module, name))

    try:
        ormsgpack.unpackb(blob, ext_hook=scan, option=_UNPACK_OPTIONS)
    except (ValueError, TypeError, ormsgpack.MsgpackDecodeError) as exc:
        raise CheckpointNotSerializable(
            f"a {cls.__name__} value was encoded into bytes that do not read back"
        ) from exc
    return keys


class _Decoder:
    """One decode: ormsgpack drops an ext hook's exception, so the hook keeps it."""

    __slots__ = ("failure", "known")

    def __init__(self, known: KnownTypes) -> None:
        self.known = known
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

    def _extension(self, code: int, data: bytes) -> Any:
        if code == _EXT_DELTA:
            return _DeltaSnapshot(self._unpack(data))
        if code == _EXT_NUMPY:
            return _numpy_array(self._unpack(data))
        parts = self._unpack(data)
        if code not in _NAMED or not isinstance(parts, list | tuple) or len(parts) < 3:
            raise CheckpointCorrupted(f"a stored extension value (code {code}) is malformed")
        module, name, args = parts[0], parts[1], parts[2]
        if type(module) is not str or type(name) is not str:
            raise CheckpointCorrupted(f"a stored extension value (code {code}) is malformed")
        if code == _EXT_METHOD:
            method = parts[3] if len(parts) > 3 else None
            owner = self.known.resolve(module, name)
            if (module, name, method) not in _ALLOWED_METHODS or owner is None:
                return self._degraded(module, f"{name}.{method}", args, "is a call not allowed")
            return self._build(module, name, args, getattr(owner, str(method)), args)
        cls = self.known.resolve(module, name)
        if cls is None:
            return self._degraded(module, name, args, "is not known to this saver")
        if code == _EXT_SINGLE_ARG:
            return self._build(module, name, args, cls, args)
        if code == _EXT_POS_ARGS and isinstance(args, list | tuple):
            if (module, name) == ("langgraph.types", "Send") and len(args) == 3:
                node, arg, timeout = args  # Send's timeout is keyword-only
                return self._build(module, name, args, lambda: cls(node, arg, timeout=timeout))
            return self._build(module, name, args, cls, *args)
        if code in (_EXT_KW_ARGS, _EXT_PYDANTIC_V1, _EXT_PYDANTIC_V2) and isinstance(args, dict):
            return self._model(module, name, cls, code, args)
        raise CheckpointCorrupted(f"a stored extension value (code {code}) is malformed")

    def _degraded(self, module: str, name: str, args: Any, why: str) -> Any:
        self.known.degrade(module, name, why)
        return args

    def _build(
        self, module: str, name: str, stored: Any, factory: Callable[..., Any], *args: Any
    ) -> Any:
        """``factory(*args)``, or ``stored`` (degraded) when the class's own code refuses."""
        try:
            return factory(*args)
        except Exception as exc:
            why = f"does not rebuild from its stored data ({type(exc).__name__})"
            return self._degraded(module, name, stored, why)

    def _model(self, module: str, name: str, cls: Any, code: int, kwargs: dict[str, Any]) -> Any:
        try:
            return cls(**kwargs)
        except Exception as exc:
            # A model stored from ``model_construct`` need not validate; the class
            # is known, so building it unvalidated is what LangGraph does too.
            construct = getattr(
                cls, "model_construct" if code == _EXT_PYDANTIC_V2 else "construct", None
            )
            if code == _EXT_KW_ARGS or construct is None:
                why = f"does not rebuild from its stored data ({type(exc).__name__})"
                return self._degraded(module, name, kwargs, why)
            return self._build(module, name, kwargs, lambda: construct(**kwargs))


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
