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
  otherwise get to run;
* as values, references to every class above (``dict`` itself included: a
  workflow's ``request_info(data, dict)`` stores it) and ``typing.Any``, and
  the type hints of :mod:`~agent_framework_mongodb.typeforms` built from them.

Every permitted class, framework classes included, must also pass
:func:`~agent_framework_mongodb.classrules.class_refusal`: no hook that
building, hashing or saving an instance would run. Resolving a name never
imports anything and never calls a module's or class's attribute hooks: names
are looked up in the dictionaries of modules that are already imported.
"""

from __future__ import annotations

import copyreg
import datetime
import decimal
import enum
import inspect
import sys
import types
import typing
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from agent_framework_mongodb.classrules import (
    class_refusal,
    has_slot_state,
    pickle_hooks,
    plain_metaclass,
)
from agent_framework_mongodb.errors import (
    MongoDBConfigurationError,
    MongoDBMappingError,
    MongoDBSerializationError,
    MongoDBTypeNotPermittedError,
)
from agent_framework_mongodb.typeforms import BUILDERS, Builder

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
#: Classes that are only ever values (referenced, never built): ``typing.Any``
#: has its own metaclass, which the class rules would refuse for a built class.
_REFERENCE_ONLY_TYPES: frozenset[Any] = frozenset({typing.Any})
_FRAMEWORK_PACKAGE = "agent_framework"
# Static accessors: they read the real attribute and never reach a custom
# metaclass's or module subclass's attribute hooks.
_CLASS_MODULE = vars(type)["__module__"].__get__
_CLASS_QUALNAME = vars(type)["__qualname__"].__get__
_CLASS_NAME = vars(type)["__name__"].__get__
_CLASS_NAMESPACE = vars(type)["__dict__"].__get__
_MODULE_NAMESPACE = vars(types.ModuleType)["__dict__"].__get__


def type_key(cls: type) -> str:
    """The ``module:qualname`` identity pickle itself uses for a class."""
    return f"{_CLASS_MODULE(cls)}:{_CLASS_QUALNAME(cls)}"


@dataclass(frozen=True, slots=True)
class Resolved:
    """A class the loader may reference, and what the pickle stream may do with it."""

    cls: type
    reducible: bool  # may be called by REDUCE (standard values, enum members by value)
    constructible: bool  # may be created by NEWOBJ with no arguments, then BUILD once
    slot_state: bool = False  # BUILD may pass (state, slot state) or hand state to __setstate__
    hashable: bool = False  # an instance may be a dict key or set member (UUID)


def _is_framework_module(module: str) -> bool:
    return module == _FRAMEWORK_PACKAGE or module.startswith(_FRAMEWORK_PACKAGE + ".")


def registered_extension(cls: type) -> bool:
    """Whether copyreg's extension registry would replace ``cls`` by a process-local code."""
    registry: Mapping[tuple[str, str], int] = copyreg._extension_registry  # type: ignore[attr-defined]
    module = _CLASS_MODULE(cls)
    return (module, _CLASS_QUALNAME(cls)) in registry or (module, _CLASS_NAME(cls)) in registry


def mapping_refusal(cls: type) -> MongoDBSerializationError:
    return MongoDBSerializationError(
        f"{type_key(cls)} is a mapping subclass; only exact dict is supported, "
        "migrate it to plain dict/list structures"
    )


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
        for cls in _STANDARD_TYPES | NATIVE_TYPES | _REFERENCE_ONLY_TYPES:
            self._cache[(cls.__module__, cls.__qualname__)] = Resolved(
                cls,
                reducible=cls in REDUCIBLE_STANDARD_TYPES,
                constructible=cls in _NEWOBJ_STANDARD_TYPES,
                hashable=cls in _NEWOBJ_STANDARD_TYPES,
            )

    def check_value_type(self, cls: type) -> None:
        """Refuse, on save, a value whose class the loader would not resolve.

        Runs on the class alone, never on the value, so no hook of the value
        runs before its class is vetted. The mapping guard comes first.
        Raises ``MongoDBSerializationError`` for classes that are permitted in
        principle but would not round-trip safely (mapping subclasses, hooks,
        copyreg extension codes) and ``MongoDBMappingError`` for unsupported
        classes.
        """
        if issubclass(cls, dict):
            raise mapping_refusal(cls)  # before the registry: a mapping is refused as one
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
            self._permit(_CLASS_MODULE(cls), _CLASS_QUALNAME(cls), cls)
        self._checked[cls] = None

    def check_class_reference(self, cls: type) -> None:
        """Refuse, on save, a class stored as a value that the loader would not resolve.

        A reference is resolved, never built, so every class the loader knows
        may be one: the exact built-ins (``dict`` too), the standard value
        types, ``typing.Any``, and the framework and listed classes, which
        pass :meth:`check_value_type` as their instances would.
        """
        if registered_extension(cls):
            raise MongoDBSerializationError(
                f"{type_key(cls)} is registered in copyreg's extension registry, which would "
                "store a process-local code; remove the registration or migrate the value"
            )
        if cls in NATIVE_TYPES or cls in _STANDARD_TYPES or cls in _REFERENCE_ONLY_TYPES:
            return
        self.check_value_type(cls)

    def resolve(self, module: str, qualname: str) -> Resolved | Builder:
        """The class (or type hint builder) a pickle global names, or a refusal
        before anything is imported or run."""
        builder = BUILDERS.get((module, qualname))
        if builder is not None:
            return builder
        resolved = self._cache.get((module, qualname))
        if resolved is None:
            resolved = self._permit(module, qualname, None)
            self._cache[(module, qualname)] = resolved
        return resolved

    def _permit(self, module: str, qualname: str, cls: type | None) -> Resolved:
        key = f"{module}:{qualname}"
        framework = _is_framework_module(module)
        permitted = framework or key in self._allowed
        if cls is None:
            if not permitted:  # refused by name: nothing is looked up
                raise _not_permitted(key)
            found = _lookup(module, qualname)
            if not issubclass(type(found), type) or type_key(cast(type, found)) != key:
                raise MongoDBMappingError(f"{key} does not name a class defined there")
            cls = cast(type, found)
        # The mapping guard runs before every other check; the ABC half of it
        # needs a plain metaclass first, since it hashes the class.
        if issubclass(cls, dict):
            raise mapping_refusal(cls)
        refusal = None if plain_metaclass(cls) else "a custom metaclass"
        if refusal is None and issubclass(cls, Mapping):
            raise mapping_refusal(cls)
        if refusal is None and not permitted:
            raise _not_permitted(key)
        refusal = refusal or class_refusal(cls)
        if refusal is not None:
            raise MongoDBTypeNotPermittedError(
                f"{key} is not permitted because loading or saving could run its code "
                f"({refusal}); checkpoint types must be plain data classes",
                key,
            )
        hooks = pickle_hooks(cls)
        is_enum = issubclass(cls, enum.Enum)
        custom_setstate = "__setstate__" in hooks
        if framework and not is_enum:
            hooks = [h for h in ("__reduce__", "__reduce_ex__") if h in hooks]
        if hooks:
            raise MongoDBTypeNotPermittedError(
                f"{key} defines pickle hooks {hooks}, so it is not permitted; checkpoint "
                "types must use default object serialization",
                key,
            )
        if inspect.isabstract(cls):
            raise MongoDBMappingError(f"{key} is abstract and cannot be checkpointed")
        return Resolved(
            cls,
            reducible=is_enum,
            constructible=not is_enum,
            slot_state=has_slot_state(cls) or custom_setstate,
        )


def _not_permitted(key: str) -> MongoDBTypeNotPermittedError:
    return MongoDBTypeNotPermittedError(
        f"type {key} is not permitted in checkpoints; list it in "
        "allowed_checkpoint_types or migrate the value to plain data",
        key,
    )


def _lookup(module: str, qualname: str) -> object:
    """Find ``module:qualname`` in the namespaces of already imported modules only.

    Importing runs module code (and every ``__init_subclass__`` and
    ``__set_name__`` of the classes it defines), and ``getattr`` on a module
    or class may run a lazy ``__getattr__`` that imports more, so neither is
    ever used: names are read from the module's and classes' dictionaries.
    """
    mod = sys.modules.get(module)
    if mod is None or not issubclass(type(mod), types.ModuleType):
        raise MongoDBMappingError(
            f"module of {module}:{qualname} is not imported; the loader never imports, so "
            "import the module that defines the type before loading"
        )
    namespace: Mapping[str, Any] = _MODULE_NAMESPACE(mod)
    found: object = None
    for part in qualname.split("."):
        found = namespace.get(part) if not part.startswith("__") else None
        if found is None:
            raise MongoDBMappingError(f"{module}:{qualname} does not exist")
        namespace = _CLASS_NAMESPACE(found) if issubclass(type(found), type) else {}
    return found
