"""Native durable stores, one module per backend beside its checkpointer, and the
registry that opens one from a store URL.

:func:`open_durable_store` is to durable stores what
:func:`agentflow.checkpoint.open_store` is to checkpointers: the same URL names
the same database, so ``--store URL`` opens both. Each backend module is
imported only when its scheme is used (a missing driver fails only that call,
with the ``pip install`` that fixes it), and exposes
``from_url(url, *, namespace=None, create=True, sealing=None)``. A backend registers here, in
:data:`_SCHEMES`; a third-party one calls :func:`register_durable_scheme`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from agentflow.checkpoint.stores import safe_url, scheme_of
from agentflow.errors import InvalidStoreUrl

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing
    from agentflow.durable.store import DurableStore

__all__ = ["DurableStoreOpener", "open_durable_store", "register_durable_scheme"]

#: Builds a durable store from a URL and a namespace.
DurableStoreOpener = Callable[..., "DurableStore"]

#: scheme -> (module with ``from_url``, optional-dependency extra)
_SCHEMES: Final[dict[str, tuple[str, str | None]]] = {
    "memory": ("agentflow.durable.memory", None),
    "sqlite": ("agentflow.durable.stores.sqlite", None),
    "file": ("agentflow.durable.stores.file", None),
    "postgresql": ("agentflow.durable.stores.postgres", "postgres"),
    "postgres": ("agentflow.durable.stores.postgres", "postgres"),
    "redis": ("agentflow.durable.stores.redis", "redis"),
    "rediss": ("agentflow.durable.stores.redis", "redis"),
    "mongodb": ("agentflow.durable.stores.mongodb", "mongodb"),
    "mongodb+srv": ("agentflow.durable.stores.mongodb", "mongodb"),
}
_REGISTERED: dict[str, DurableStoreOpener] = {}


def register_durable_scheme(scheme: str, opener: DurableStoreOpener) -> None:
    """Let :func:`open_durable_store` open ``scheme://...`` with
    ``opener(url, namespace=, create=, sealing=)``."""
    if not scheme.isascii() or not scheme.replace("+", "").isalnum() or scheme.lower() != scheme:
        raise InvalidStoreUrl(f"a scheme is lower-case letters, digits and '+', not {scheme!r}")
    _REGISTERED[scheme] = opener


def _opener(scheme: str, url: str) -> DurableStoreOpener:
    registered = _REGISTERED.get(scheme)
    if registered is not None:
        return registered
    if scheme not in _SCHEMES:
        known = ", ".join(sorted({*_SCHEMES, *_REGISTERED}))
        raise InvalidStoreUrl(f"no durable store for {safe_url(url)!r}; known schemes: {known}")
    module_name, extra = _SCHEMES[scheme]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise InvalidStoreUrl(
                f"this agentflow has no durable store for {scheme}:// yet"
            ) from exc
        hint = f"; install it with: pip install 'agentflow[{extra}]'" if extra else ""
        raise InvalidStoreUrl(f"the {scheme} durable store is not available ({exc}){hint}") from exc
    opener: DurableStoreOpener = module.from_url
    return opener


def open_durable_store(
    url: str,
    *,
    namespace: str | None = None,
    create: bool = True,
    sealing: KeyRing | None = None,
) -> DurableStore:
    """A durable store for ``url``, bound to ``namespace``; the caller closes it.

    The URLs are the checkpointers' (``memory://NAME``, ``sqlite:///PATH``,
    ``postgresql://...``, ...); the store lives in the same database, so a
    run's record and its checkpoints are found under one URL. With
    ``create=False`` (read-only callers) a store whose tables, keys or layout
    do not exist raises :class:`~agentflow.errors.StoreNotFound` on its first
    call and nothing is created. With ``sealing`` (a
    :class:`~agentflow.checkpoint.sealing.KeyRing`, the one the checkpointer's
    :class:`~agentflow.checkpoint.sealing.SealedCodec` holds) every body and
    journal entry is sealed, and a part that is not is refused.
    """
    opener = _opener(scheme_of(url), url)
    return opener(url, namespace=namespace, create=create, sealing=sealing)
