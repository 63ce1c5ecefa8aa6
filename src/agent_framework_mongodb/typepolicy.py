"""Which Python types a checkpoint may contain, shared by save and load.

Saving and loading must agree exactly on what is permitted, or a checkpoint
could be written that can never be read (or read that should never have been
written). Both therefore consult one :class:`TypePolicy`:

* a narrow exact-type set of standard values whose stdlib reducers are part of
  the documented codec;
* concrete ``agent_framework`` classes, trusted because they are the
  framework's own code (their ``__getstate__``/``__setstate__`` are honoured,
  since the framework uses them to drop runtime-only fields);
* application classes listed as ``module:qualname``. The listing permits class
  resolution only: a listed class that defines any pickle hook is refused,
  because its hook is code an attacker who can write the collection would
  otherwise get to run.
"""

from __future__ import annotations

import copyreg
import datetime
import decimal
import enum
import importlib
import inspect
import sys
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agent_framework_mongodb.errors import (
    MongoDBConfigurationError,
    MongoDBMappingError,
    MongoDBSerializationError,
)

__all__ = ["NATIVE_TYPES", "REDUCIBLE_STANDARD_TYPES", "Resolved", "TypePolicy", "type_key"]

#: Types pickle writes with its own opcodes, never through a global reference.
NATIVE_TYPES: frozenset[type] = frozenset(
    {type(None), bool, int, float, str, bytes, bytearray, dict, list, tuple, set, frozenset}
)
#: Standard values whose stdlib ``__reduce__`` calls the class with plain arguments.
REDUCIBLE_STANDARD_TYPES: frozenset[type] = frozenset(
    {
        datetime.date,
        datetime.datetime,
        datetime.time,
        datetime.timedelta,
        datetime.timezone,
        decimal.Decimal,
    }
)
#: Standard values rebuilt by ``NEWOBJ`` plus the class's own stdlib ``__setstate__``.
_NEWOBJ_STANDARD_TYPES: frozenset[type] = frozenset({uuid.UUID})
_STANDARD_TYPES = REDUCIBLE_STANDARD_TYPES | _NEWOBJ_STANDARD_TYPES
_PICKLE_HOOKS = (
    "__reduce__",
    "__reduce_ex__",
    "__getstate__",
    "__setstate__",
    "__getnewargs__",
    "__getnewargs_ex__",
)
_FRAMEWORK_PACKAGE = "agent_framework"


def type_key(cls: type) -> str:
    """The ``module:qualname`` identity pickle itself uses for a class."""
    return f"{cls.__module__}:{cls.__qualname__}"


@dataclass(frozen=True, slots=True)
class Resolved:
    """A class the loader may reference, and what the pickle stream may do with it."""

    cls: type
    reducible: bool  # may be called by REDUCE (standard values, enum members by value)
    constructible: bool  # may be created by NEWOBJ with no arguments, then BUILD


def _is_framework_module(module: str) -> bool:
    return module == _FRAMEWORK_PACKAGE or module.startswith(_FRAMEWORK_PACKAGE + ".")


def _hook_owner(cls: type, name: str) -> type | None:
    for klass in cls.__mro__:
        if name in vars(klass):
            return klass
    return None


def custom_hooks(cls: type) -> list[str]:
    """The pickle and construction hooks ``cls`` defines beyond ``object``'s and ``Enum``'s."""
    found = []
    for name in _PICKLE_HOOKS:
        owner = _hook_owner(cls, name)
        if owner is None or owner is object:
            continue
        if issubclass(cls, enum.Enum):
            # Enum.__reduce_ex__ reduces a member to (cls, (value,)); it runs
            # before any mixin hook such as int.__getnewargs__ could.
            if name == "__reduce_ex__" and owner is enum.Enum:
                continue
            if name in ("__getnewargs__", "__getnewargs_ex__") and owner in NATIVE_TYPES:
                continue
        found.append(name)
    if issubclass(cls, enum.Enum):
        # Loading calls the enum class with the stored value, which reaches
        # _missing_ for unknown values: an override is a load-time hook.
        if _hook_owner(cls, "_missing_") not in (enum.Enum, enum.Flag):
            found.append("_missing_")
    elif _hook_owner(cls, "__new__") is not object:
        found.append("__new__")
    return found


def registered_extension(cls: type) -> bool:
    """Whether copyreg's extension registry would replace ``cls`` by a process-local code."""
    registry: Mapping[tuple[str, str], int] = copyreg._extension_registry  # type: ignore[attr-defined]
    module = cls.__module__
    return (module, cls.__qualname__) in registry or (module, cls.__name__) in registry


class TypePolicy:
    """The permitted types of one storage: standard values, framework and listed classes."""

    def __init__(self, allowed_checkpoint_types: Iterable[str] = ()) -> None:
        allowed = frozenset(allowed_checkpoint_types)
        for key in allowed:
            module, sep, qualname = key.partition(":") if isinstance(key, str) else ("", "", "")
            if not (sep and module and qualname):
                raise MongoDBConfigurationError(
                    "allowed_checkpoint_types entries must be 'module:qualname' strings"
                )
        self._allowed = allowed
        self._cache: dict[tuple[str, str], Resolved] = {}
        self._checked: dict[type, None] = {}
        for cls in _STANDARD_TYPES | NATIVE_TYPES:
            self._cache[(cls.__module__, cls.__qualname__)] = Resolved(
                cls, cls in REDUCIBLE_STANDARD_TYPES, cls in _NEWOBJ_STANDARD_TYPES
            )

    def check_value_type(self, cls: type) -> None:
        """Refuse, on save, an object whose class the loader would not resolve.

        Raises ``MongoDBSerializationError`` for classes that are permitted in
        principle but would not round-trip safely (pickle hooks, copyreg
        extension codes) and ``MongoDBMappingError`` for unsupported classes.
        """
        # The registry is process-global and may change at any time, so this
        # check is never cached; the rest of the verdict depends on the class only.
        if registered_extension(cls):
            raise MongoDBSerializationError(
                f"{type_key(cls)} is registered in copyreg's extension registry, which would "
                "store a process-local code; remove the registration or migrate the value"
            )
        if cls in self._checked:
            return
        if cls not in _STANDARD_TYPES and cls not in NATIVE_TYPES:
            self._permit(cls.__module__, cls.__qualname__, cls)
        self._checked[cls] = None

    def resolve(self, module: str, qualname: str) -> Resolved:
        """The class a pickle global names, or a refusal before anything is imported or run."""
        resolved = self._cache.get((module, qualname))
        if resolved is None:
            resolved = self._permit(module, qualname, None)
            self._cache[(module, qualname)] = resolved
        return resolved

    def _permit(self, module: str, qualname: str, cls: type | None) -> Resolved:
        key = f"{module}:{qualname}"
        framework = _is_framework_module(module)
        if not framework and key not in self._allowed:
            raise MongoDBMappingError(
                f"type {key} is not permitted in checkpoints; list it in "
                "allowed_checkpoint_types or migrate the value to plain data"
            )
        found = cls if cls is not None else _lookup(module, qualname, import_allowed=not framework)
        if not isinstance(found, type) or type_key(found) != key:
            raise MongoDBMappingError(f"{key} does not name a class defined there")
        cls = found
        if issubclass(cls, (dict, Mapping)):
            raise MongoDBSerializationError(
                f"{key} is a mapping subclass; only exact dict is supported, "
                "migrate it to plain dict/list structures"
            )
        if issubclass(cls, enum.Enum):
            hooks = custom_hooks(cls)
        elif framework:
            hooks = [h for h in ("__reduce__", "__reduce_ex__") if h in custom_hooks(cls)]
        else:
            hooks = custom_hooks(cls)
        if hooks:
            raise MongoDBSerializationError(
                f"{key} defines pickle hooks {hooks}; checkpoint types must use default "
                "object serialization"
            )
        if inspect.isabstract(cls):
            raise MongoDBMappingError(f"{key} is abstract and cannot be checkpointed")
        is_enum = issubclass(cls, enum.Enum)
        return Resolved(cls, reducible=is_enum, constructible=not is_enum)


def _lookup(module: str, qualname: str, *, import_allowed: bool) -> object:
    """Find ``module:qualname``; framework modules only if already imported.

    Importing runs module code, so the loader imports only modules an
    operator listed explicitly; framework classes in a checkpoint always come
    from modules the running workflow has already imported.
    """
    mod = sys.modules.get(module)
    if mod is None:
        if not import_allowed:
            raise MongoDBMappingError(f"module of {module}:{qualname} is not loaded")
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            raise MongoDBMappingError(f"cannot import the module of {module}:{qualname}") from exc
    obj: Any = mod
    for part in qualname.split("."):
        if part.startswith("__") or not hasattr(obj, part):
            raise MongoDBMappingError(f"{module}:{qualname} does not exist")
        obj = getattr(obj, part)
    return obj
