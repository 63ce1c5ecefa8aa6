"""What a graph declares about its durable runs: policies, extensions, credentials.

These settings are part of what a run *is*, so they live on the
:class:`~agentflow.runtime.Graph` (every process that loads the graph gets
them, the command line included) and are pinned by the run definition each
thread's durable record embeds: a process that resumes a thread with other
settings is refused (``checkpoint_definition_mismatch``) before any call.

The run definition is the original's closed document, built from the graph's
name and these settings only (never from a run's input), so any process can
rebuild it. Credentials sit in ``model`` at the declared ``credential_slots``;
the stored definition holds ``<credential-redacted>`` there, so the secret is
never persisted, rotating it keeps the digest, and a resume must be given the
live value (a placeholder is refused with ``checkpoint_credential_not_supplied``).

The original's producer stability rules apply here, where the definition is
built (:func:`~agentflow.durable.policies.stability.require_stable_producer`): a
reconciliation provider and non-empty metadata steer the run from process-local
code, so each needs a stable reference in ``capability_refs`` (slots
``reconciliation_provider`` and ``behavior_affecting_run_metadata``), else the
graph does not compile (``checkpoint_definition_unstable``); so does a callable
inside the metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from agentflow.durable import (
    DEFAULT_MAX_EXTENSION_STATE_BYTES,
    RUN_DEFINITION_SCHEMA,
    AmbiguousModelPolicy,
    AmbiguousToolPolicy,
    CapabilityRef,
    CheckpointConfig,
    CheckpointExtension,
    ReconciliationProvider,
    extension_identity,
    live_credentials,
    normalize_run_definition,
    require_declared_credential_headers,
    run_definition_digest,
)
from agentflow.durable.errors import DurableError
from agentflow.durable.policies.stability import (
    BEHAVIOR_METADATA_SLOT,
    RECONCILIATION_PROVIDER_SLOT,
    require_stable_producer,
)

__all__ = ["Durability", "ExtensionFactory", "RunDefinition"]

#: Makes a fresh extension for one run (its state is restored from the run's record).
ExtensionFactory = Callable[[], CheckpointExtension]
#: Marks a run definition as the runtime's, so other tools can tell.
_AGENT_TYPE = "agentflow.graph"


@dataclass(frozen=True)
class RunDefinition:
    """A graph's run definition: the stored (redacted) form, its digest, the live secrets."""

    stored: dict[str, Any]
    digest: str
    credentials: dict[str, Any]


@dataclass(frozen=True)
class Durability:
    """Durable-run settings of a graph (``Graph(name, durability=...)``).

    * ``ambiguous_model_policy``: ``require_reconciliation`` (default) or
      ``retry_with_duplicate_risk`` (a model call left ambiguous by a crash is
      made again, and the risk is recorded);
    * ``ambiguous_tool_policy``: ``require_reconciliation`` (default) or
      ``retry_idempotent_only`` (an ambiguous call of a tool declared
      ``idempotent=True`` is made again, under the same ``idem_`` key);
    * ``reconciliation``: a :class:`~agentflow.durable.ReconciliationProvider`
      that settles ambiguous calls by asking the outside world; it decides
      before, and instead of, the policies; it needs a stable reference
      ``capability_refs={"reconciliation_provider": CapabilityRef(id, version)}``;
    * ``extensions``: factories of :class:`~agentflow.durable.CheckpointExtension`,
      one fresh instance per run, whose state is saved with every step and
      restored before a resumed run calls anything; ``required_extensions``
      names namespaces a resume must find (sorted);
    * ``model``: what the run definition records about the model (provider,
      id, settings), with secrets at ``credential_slots`` (JSON pointers into
      the definition, such as ``/model/settings/extra_headers/authorization``);
    * ``metadata``: free JSON recorded in the definition (a deployment version,
      say: changing it refuses to resume older runs); when not empty it needs
      a stable reference under ``behavior_affecting_run_metadata``;
    * ``capability_refs``: stable ``{id, version}`` references of the
      process-local code that steers the run, by slot; recorded in the
      definition, so changing one refuses to resume older runs.
    """

    ambiguous_model_policy: AmbiguousModelPolicy | str = AmbiguousModelPolicy.REQUIRE_RECONCILIATION
    ambiguous_tool_policy: AmbiguousToolPolicy | str = AmbiguousToolPolicy.REQUIRE_RECONCILIATION
    reconciliation: ReconciliationProvider | None = None
    extensions: Sequence[ExtensionFactory] = ()
    required_extensions: Sequence[str] = ()
    max_extension_state_bytes: int = DEFAULT_MAX_EXTENSION_STATE_BYTES
    model: Mapping[str, Any] = field(default_factory=dict)
    credential_slots: Sequence[str] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    capability_refs: Mapping[str, CapabilityRef] = field(default_factory=dict)

    @cached_property
    def config(self) -> CheckpointConfig:
        """The settings as the pure layer's config (validated once, original's codes)."""
        config = CheckpointConfig(
            store=_PROCESS_LOCAL,
            ambiguous_model_policy=self.ambiguous_model_policy,  # type: ignore[arg-type]
            ambiguous_tool_policy=self.ambiguous_tool_policy,  # type: ignore[arg-type]
            required_extension_namespaces=list(self.required_extensions),
            max_extension_state_bytes=self.max_extension_state_bytes,
            credential_slots=list(self.credential_slots),
            capability_refs=dict(self.capability_refs),
        )
        config.validate()
        return config

    @property
    def model_policy(self) -> AmbiguousModelPolicy:
        return self.config.ambiguous_model_policy

    @property
    def tool_policy(self) -> AmbiguousToolPolicy:
        return self.config.ambiguous_tool_policy

    def new_extensions(self) -> list[CheckpointExtension]:
        """Fresh extension instances for one run."""
        made = [factory() for factory in self.extensions]
        for extension in made:
            if not isinstance(extension, CheckpointExtension):
                raise DurableError(
                    "checkpoint_extension_invalid",
                    f"an extension factory returned {type(extension).__name__}, "
                    "not a CheckpointExtension",
                )
        return made

    def definition(self, graph_name: str) -> RunDefinition:
        """The run definition of ``graph_name`` under these settings (validated)."""
        config = self.config
        configured = [RECONCILIATION_PROVIDER_SLOT] if self.reconciliation is not None else []
        if self.metadata:
            configured.append(BEHAVIOR_METADATA_SLOT)
        require_stable_producer(
            configured, config.capability_refs, recorded={"run_metadata": self.metadata}
        )
        identities = [extension_identity(extension) for extension in self.new_extensions()]
        extensions = sorted(
            (
                {
                    "namespace": identity.namespace,
                    "version": identity.version,
                    "required": identity.required
                    or identity.namespace in config.required_extension_namespaces,
                }
                for identity in identities
            ),
            key=lambda item: str(item["namespace"]),
        )
        live: dict[str, Any] = {
            "schema_version": RUN_DEFINITION_SCHEMA,
            "agent": {"name": graph_name, "type": _AGENT_TYPE},
            "root_input": "",
            "compiled_prompt": "",
            "initial_messages": [],
            "initial_shared_state": {},
            "run_metadata": dict(self.metadata),
            "context_ref": None,
            "model": dict(self.model),
            "credential_slots": list(config.credential_slots),
            "runtime_controls": {},
            "tools": [],
            "tool_policy": {"allowed_tools": None, "disallowed_tools": []},
            "checkpoint_policy": {
                "ambiguous_model_policy": config.ambiguous_model_policy.value,
                "ambiguous_tool_policy": config.ambiguous_tool_policy.value,
                "max_extension_state_bytes": config.max_extension_state_bytes,
            },
            "budget_limits": None,
            "output_schema": None,
            "workspace_ref": None,
            "session_ref": None,
            "extensions": extensions,
            "capability_refs": {
                slot: reference.to_dict() for slot, reference in config.capability_refs.items()
            },
        }
        require_declared_credential_headers(live, config.credential_slots)
        stored = normalize_run_definition(live, config.credential_slots)
        credentials = live_credentials(live, config.credential_slots)
        return RunDefinition(stored, run_definition_digest(stored), credentials)


class _ProcessLocal:
    """Stands for the store in the pure config: the runtime is handed its store."""

    def __repr__(self) -> str:
        return "<the compiled graph's durable store>"


_PROCESS_LOCAL = _ProcessLocal()
