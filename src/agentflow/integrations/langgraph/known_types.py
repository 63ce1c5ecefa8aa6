"""Which stored types a saver rebuilds, and how it learns them without configuration.

A checkpoint names the classes of its values by ``(module, name)``; building
one runs that class's code with stored arguments, so only a type the
application itself vouches for is ever built. It vouches in four ways:

- :data:`DEFAULT_ALLOWED`: standard library values, LangChain's message,
  document, agent, output and prompt types, LangGraph's own types;
- ``allowed=`` at construction (classes, or ``(module, name)`` pairs);
- the graphs that run with the saver: every class their state, input,
  output and context schemas and their channels name (LangGraph hands these
  over in strict mode; otherwise the saver reads them from the graph itself);
- the values the saver itself wrote in this process: a type only reaches the
  encoder as a live object of the application's.

Everything else is *unknown*: it is never imported or called, and reads back
as the data it was stored with (the field dict, as LangGraph's stock savers
give it), with one warning per type. A pydantic or dataclass state schema
then validates that dict back into the model.
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
import types
from collections import Counter
from collections.abc import Iterable
from typing import Any, Final

__all__ = ["DEFAULT_ALLOWED", "KnownTypes", "TypeKey", "type_key"]

logger = logging.getLogger("agentflow.integrations.langgraph")

TypeKey = tuple[str, str]

_MESSAGES: Final = ("base", "human", "ai", "system", "chat", "tool", "function")
_MESSAGE_NAMES: Final = ("Base", "Human", "AI", "System", "Chat", "Tool", "Function")

#: Data-only types every saver rebuilds: LangGraph's own strict-mode list
#: (``SAFE_MSGPACK_TYPES``) plus LangChain's agent, output and prompt values.
DEFAULT_ALLOWED: Final[frozenset[TypeKey]] = frozenset(
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
        ("re", "compile"),
        *(
            (f"langchain_core.messages.{module}", f"{name}Message{chunk}")
            for module, name in zip(_MESSAGES, _MESSAGE_NAMES, strict=True)
            for chunk in ("", "Chunk")
        ),
        ("langchain_core.messages.modifier", "RemoveMessage"),
        ("langchain_core.documents.base", "Document"),
        *(
            ("langchain_core.agents", name)
            for name in ("AgentAction", "AgentActionMessageLog", "AgentFinish", "AgentStep")
        ),
        ("langchain_core.outputs.generation", "Generation"),
        ("langchain_core.outputs.generation", "GenerationChunk"),
        ("langchain_core.outputs.chat_generation", "ChatGeneration"),
        ("langchain_core.outputs.chat_generation", "ChatGenerationChunk"),
        ("langchain_core.outputs.chat_result", "ChatResult"),
        ("langchain_core.outputs.llm_result", "LLMResult"),
        ("langchain_core.outputs.run_info", "RunInfo"),
        *(
            ("langchain_core.prompt_values", name)
            for name in ("StringPromptValue", "ChatPromptValue", "ChatPromptValueConcrete")
        ),
        *(
            ("langgraph.types", name)
            for name in (
                "Send",
                "Interrupt",
                "Command",
                "Overwrite",
                "TimeoutPolicy",
                "StateSnapshot",
                "PregelTask",
            )
        ),
        ("langgraph.store.base", "Item"),
        ("langgraph.store.base", "GetOp"),
    }
)
#: Types named by how many warnings; later ones are counted, not logged.
_MAX_WARNED: Final = 1000


def type_key(item: tuple[str, ...] | type) -> TypeKey:
    """``(module, name)`` of a class or of an allowlist entry."""
    if isinstance(item, type):
        return (item.__module__, item.__name__)
    if isinstance(item, tuple) and len(item) >= 2 and all(isinstance(p, str) for p in item):
        # LangGraph's schema walk may name a nested type with more parts.
        return (".".join(item[:-1]), item[-1])
    raise TypeError(f"an allowlist entry is a class or a (module, name) tuple, not {item!r}")


class KnownTypes:
    """The types one saver (and every serializer cloned from it) may rebuild.

    Three tables, resolved in this order: classes the saver holds itself
    (given as classes, or named by a graph's schemas: rebuilt as exactly
    that class, even one defined inside a function); names it was given
    (imported when first needed, as LangGraph does for its allowlist); names
    its own encoder wrote (looked up among modules already imported, never
    imported). ``degraded`` counts the values of unknown types read back as
    their stored data, per type.
    """

    def __init__(self, allowed: Iterable[tuple[str, ...] | type] = ()) -> None:
        self._lock = threading.Lock()
        self._classes: dict[TypeKey, type] = {}
        self._names: set[TypeKey] = set(DEFAULT_ALLOWED)
        self._written: set[TypeKey] = set()
        self._warned: set[TypeKey] = set()
        self.degraded: Counter[TypeKey] = Counter()
        self.allow(allowed)

    def allow(self, items: Iterable[tuple[str, ...] | type]) -> None:
        """Trust ``items``: classes as themselves, ``(module, name)`` pairs by import."""
        with self._lock:
            for item in items:
                if isinstance(item, type):
                    self._classes[type_key(item)] = item
                else:
                    self._names.add(type_key(item))

    def learn_classes(self, classes: Iterable[type]) -> None:
        """Trust classes the application declared (a graph's schemas)."""
        with self._lock:
            for cls in classes:  # the latest graph's class wins a shared name
                self._classes[type_key(cls)] = cls

    def learn_written(self, keys: Iterable[TypeKey]) -> None:
        """Trust names this process's encoder just wrote from live objects."""
        with self._lock:
            self._written.update(keys)

    def names(self) -> frozenset[TypeKey]:
        """Every ``(module, name)`` this saver currently rebuilds."""
        with self._lock:
            return frozenset(self._names | self._written | set(self._classes))

    def resolve(self, module: str, name: str) -> Any:
        """The class (or, for ``re.compile``, function) to build, or None when unknown."""
        key = (module, name)
        cls = self._classes.get(key)
        if cls is not None:
            return cls
        if key in self._names:
            try:
                return getattr(importlib.import_module(module), name)
            except (ImportError, AttributeError):
                return None
        if key in self._written:
            found = _imported_class(module, name)
            if found is not None:
                return found
        return None

    def degrade(self, module: object, name: object, why: str) -> None:
        """Count (and, once per type, log) a value read back as its stored data."""
        key = (str(module), str(name))
        self.degraded[key] += 1
        if key in self._warned or len(self._warned) >= _MAX_WARNED:
            return
        self._warned.add(key)
        logger.warning(
            "stored type %s.%s %s; it reads back as the data it was stored with. If it is "
            "yours, pass allowed=[(%r, %r)] to AgentflowSaver or name it in the graph's schema",
            module,
            name,
            why,
            module,
            name,
        )


def _imported_class(module: str, name: str) -> type | None:
    """``module.name`` when it is a class of a module already imported, read
    from the module's dictionary (no import, no module ``__getattr__``)."""
    mod = sys.modules.get(module)
    if not isinstance(mod, types.ModuleType):
        return None
    found = vars(mod).get(name)
    return found if isinstance(found, type) else None
