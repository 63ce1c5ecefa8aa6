"""The immutable scope and settings a storage is bound to at construction.

Agent Framework's ``CheckpointStorage`` methods carry no tenant or run, so a
storage serves exactly one (tenant, application, workflow, session) and every
query it issues carries that whole scope. The scope discriminator is a hash
of the four raw values with unambiguous framing: a tenant named ``"a|b"``
can never collide with tenant ``"a"`` of application ``"b"``.
"""

from __future__ import annotations

import datetime
import hashlib
from dataclasses import dataclass, field
from typing import Any

from agent_framework_mongodb.errors import MongoDBConfigurationError

__all__ = ["DEFAULT_MAX_PAGE_SIZE", "DEFAULT_PAGE_SIZE", "MongoDBCheckpointStorageOptions"]

DEFAULT_PAGE_SIZE = 100
DEFAULT_MAX_PAGE_SIZE = 1000
DEFAULT_DATABASE_NAME = "agent_framework"
DEFAULT_COLLECTION_NAME = "workflow_checkpoints"
_MAX_SCOPE_VALUE = 512


@dataclass(frozen=True, slots=True)
class MongoDBCheckpointStorageOptions:
    """Scope and settings of one :class:`MongoDBCheckpointStorage`.

    ``tenant_id``, ``workflow_name`` and ``session_id`` are required;
    ``application_id`` is optional. ``workflow_name`` must equal the name the
    workflow is built with (``WorkflowBuilder(name=...)``): saves and list
    calls that name any other workflow are refused.

    ``ttl`` sets ``expires_at`` on every saved checkpoint (``None`` keeps them
    until deleted). ``page_size`` is the default page of
    ``list_checkpoint_page`` and of the inherited list methods;
    ``max_page_size`` is the hard ceiling on any requested ``limit``.
    ``allowed_checkpoint_types`` lists application classes
    (``"module:qualname"``) the loader may resolve.
    """

    tenant_id: str
    workflow_name: str
    session_id: str
    application_id: str | None = None
    database_name: str = DEFAULT_DATABASE_NAME
    collection_name: str = DEFAULT_COLLECTION_NAME
    ttl: datetime.timedelta | None = None
    page_size: int = DEFAULT_PAGE_SIZE
    max_page_size: int = DEFAULT_MAX_PAGE_SIZE
    allowed_checkpoint_types: tuple[str, ...] = field(default=())
    _discriminator: str = field(init=False, repr=False, compare=False, default="")

    def __post_init__(self) -> None:
        for name in ("tenant_id", "workflow_name", "session_id", "database_name"):
            _check_text(name, getattr(self, name))
        _check_text("collection_name", self.collection_name)
        if self.application_id is not None:
            _check_text("application_id", self.application_id)
        if self.ttl is not None and (
            not isinstance(self.ttl, datetime.timedelta) or self.ttl <= datetime.timedelta(0)
        ):
            raise MongoDBConfigurationError("ttl must be a positive timedelta or None")
        for name in ("page_size", "max_page_size"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise MongoDBConfigurationError(f"{name} must be a positive int")
        if self.page_size > self.max_page_size:
            raise MongoDBConfigurationError("page_size must not exceed max_page_size")
        types = self.allowed_checkpoint_types
        if isinstance(types, str) or not all(isinstance(t, str) for t in types):
            raise MongoDBConfigurationError("allowed_checkpoint_types must be a tuple of strings")
        object.__setattr__(self, "allowed_checkpoint_types", tuple(types))
        scope = (self.tenant_id, self.application_id, self.workflow_name, self.session_id)
        object.__setattr__(self, "_discriminator", _digest("scope", *scope))

    @property
    def scope_discriminator(self) -> str:
        """SHA-256 over the framed raw scope values."""
        return self._discriminator

    def scope_filter(self) -> dict[str, Any]:
        """The equality filter on the discriminator and every raw scope field."""
        return {
            "scope_discriminator": self.scope_discriminator,
            "tenant_id": self.tenant_id,
            "application_id": self.application_id,
            "workflow_name": self.workflow_name,
            "session_id": self.session_id,
        }

    def document_id(self, checkpoint_id: str) -> str:
        """The deterministic ``_id`` of a checkpoint in this scope."""
        return _digest("checkpoint", self.scope_discriminator, checkpoint_id)

    def counter_id(self) -> str:
        """The deterministic ``_id`` of this scope's sequence counter."""
        return _digest("counter", self.scope_discriminator)

    def refusal_id(self) -> str:
        """The deterministic ``_id`` of this scope's refused-save record."""
        return _digest("refusal", self.scope_discriminator)


def storable_text(value: str) -> bool:
    """Whether MongoDB can store ``value``: valid UTF-8, i.e. no lone surrogates."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_text(name: str, value: object) -> None:
    if (
        not isinstance(value, str)
        or not value
        or "\x00" in value
        or len(value) > _MAX_SCOPE_VALUE
        or not storable_text(value)
    ):
        raise MongoDBConfigurationError(
            f"{name} must be a non-empty string without NUL or lone surrogates of at most "
            f"{_MAX_SCOPE_VALUE} chars"
        )


def _digest(domain: str, *parts: str | None) -> str:
    hasher = hashlib.sha256(domain.encode())
    for part in parts:
        if part is None:
            hasher.update(b"\x00-")
        else:
            data = part.encode("utf-8", "surrogatepass")
            hasher.update(b"\x00+%d:" % len(data) + data)
    return hasher.hexdigest()
