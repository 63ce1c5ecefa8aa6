"""The nested values of a v1 record, checked as strictly as the original reads them.

The original decodes these into its own types (``Message``, ``CycleRecord``,
``AgentResult``, ``BudgetUsageSnapshot``); this package keeps them as JSON,
as it does in v2 records, and checks here the members those types need and
the types they insist on. Every failure is ``checkpoint_v1_invalid``, the
one code the original gives a v1 record it cannot read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from agentflow.durable.errors import DurableError
from agentflow.durable.wire.canonical import MAX_WIRE_INTEGER
from agentflow.durable.wire.validators import is_blank

__all__ = [
    "V1_INVALID",
    "V1_STATUSES",
    "check_budget_usage",
    "check_cycle",
    "check_message",
    "check_terminal_result",
    "unsigned",
]

V1_INVALID: Final = "checkpoint_v1_invalid"
#: Every status a v1 record may carry (the original's ``AgentStatus``).
V1_STATUSES: Final = frozenset(
    {
        "pending",
        "running",
        "wait_user",
        "completed",
        "failed",
        "max_cycles",
        "reconciliation_required",
    }
)
_ROLES: Final = frozenset({"system", "user", "assistant", "tool"})
_COMPLETION_REASONS: Final = frozenset(
    {
        "tool_finish",
        "no_tool_finish",
        "stop_on_first_tool",
        "stop_at_tool_name",
        "wait_user",
        "max_cycles",
        "cancelled",
        "failed",
        "budget_exhausted",
    }
)
U32_MAX: Final = 2**32 - 1
U64_MAX: Final = 2**64 - 1


def invalid(message: str) -> DurableError:
    return DurableError(V1_INVALID, message)


def unsigned(value: object, what: str, maximum: int = U64_MAX) -> int:
    """``value`` as an integer in 0..maximum (never a bool or a float)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        raise invalid(f"{what} must be an unsigned integer of at most {maximum}")
    return value


def _object(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise invalid(f"{what} must be an object")
    return value


def _string(data: Mapping[str, Any], name: str, what: str) -> str:
    value = data.get(name)
    if not isinstance(value, str):
        raise invalid(f"{what}.{name} must be a string")
    return value


def _optional_string(data: Mapping[str, Any], name: str, what: str) -> None:
    if data.get(name) is not None and not isinstance(data[name], str):
        raise invalid(f"{what}.{name} must be a string or null")


def _array(data: Mapping[str, Any], name: str, what: str, *, required: bool) -> list[Any]:
    value = data.get(name)
    if value is None and not required:
        return []
    if not isinstance(value, list):
        raise invalid(f"{what}.{name} must be an array")
    return value


def _optional_object(data: Mapping[str, Any], name: str, what: str) -> None:
    if data.get(name) is not None and not isinstance(data[name], Mapping):
        raise invalid(f"{what}.{name} must be an object")


def _tool_call(value: object, what: str) -> None:
    call = _object(value, what)
    _string(call, "id", what)
    function = call.get("function")
    if isinstance(function, Mapping):  # the OpenAI shape messages carry
        _string(function, "name", f"{what}.function")
    else:
        _string(call, "name", what)
        _optional_object(call, "arguments", what)


def check_message(value: object, what: str, *, strict: bool = True) -> None:
    """A message: a known role, string content (strict: required), typed optional members."""
    message = _object(value, what)
    if _string(message, "role", what) not in _ROLES:
        raise invalid(f"{what}.role must be one of {', '.join(sorted(_ROLES))}")
    if strict:
        _string(message, "content", what)
    for index, call in enumerate(_array(message, "tool_calls", what, required=False)):
        _tool_call(call, f"{what}.tool_calls[{index}]")
    _optional_object(message, "metadata", what)
    for name in ("name", "tool_call_id", "reasoning_content", "image_url"):
        _optional_string(message, name, what)


def check_cycle(value: object, what: str, *, strict: bool = True) -> None:
    """A cycle record (strict: every member the original writes, with its type)."""
    cycle = _object(value, what)
    if strict:
        unsigned(cycle.get("index"), f"{what}.index", U32_MAX)
        _string(cycle, "assistant_message", what)
        if not isinstance(cycle.get("memory_compacted"), bool):
            raise invalid(f"{what}.memory_compacted must be a boolean")
        if not isinstance(cycle.get("token_usage"), Mapping):
            raise invalid(f"{what}.token_usage must be an object")
    for index, call in enumerate(_array(cycle, "tool_calls", what, required=strict)):
        _tool_call(call, f"{what}.tool_calls[{index}]")
    for index, result in enumerate(_array(cycle, "tool_results", what, required=strict)):
        _string(_object(result, f"{what}.tool_results[{index}]"), "tool_call_id", what)


def _wire(value: object, what: str) -> int:
    return unsigned(value, what, MAX_WIRE_INTEGER)


def check_budget_usage(value: object, what: str = "budget_usage") -> None:
    """A budget usage snapshot: JSON-safe counters, named tool counts, unique dimensions."""
    budget = _object(value, what)
    for name in ("cycles", "tool_calls", "elapsed_ms"):
        _wire(budget.get(name), f"{what}.{name}")
    for name in ("total_tokens", "uncached_input_tokens"):
        if budget.get(name) is not None:
            _wire(budget[name], f"{what}.{name}")
    by_name = _object(budget.get("tool_calls_by_name"), f"{what}.tool_calls_by_name")
    for tool, count in by_name.items():
        if is_blank(tool):
            raise invalid(f"{what}.tool_calls_by_name has a blank tool name")
        _wire(count, f"{what}.tool_calls_by_name[{tool!r}]")
    cost = budget.get("host_cost")
    if cost is not None:
        cost = _object(cost, f"{what}.host_cost")
        if is_blank(_string(cost, "unit", f"{what}.host_cost")):
            raise invalid(f"{what}.host_cost.unit must be non-empty")
        currency = cost.get("currency")
        if currency is not None and (not isinstance(currency, str) or is_blank(currency)):
            raise invalid(f"{what}.host_cost.currency must be a non-empty string or null")
        _wire(cost.get("amount_microunits"), f"{what}.host_cost.amount_microunits")
    dimensions = _array(budget, "unavailable_dimensions", what, required=True)
    names = [
        _string(_object(item, f"{what}.unavailable_dimensions[]"), "dimension", what)
        for item in dimensions
    ]
    for item in dimensions:
        _string(item, "reason", f"{what}.unavailable_dimensions[]")
    if len(set(names)) != len(names):
        raise invalid(f"{what}: budget unavailable dimensions must be unique")


def check_terminal_result(value: object, status: str) -> None:
    """A terminal result whose ``status`` equals the record's."""
    what = "terminal_result"
    result = _object(value, what)
    result_status = _string(result, "status", what)
    if result_status not in V1_STATUSES:
        raise invalid(f"unknown terminal_result status {result_status!r}")
    for index, message in enumerate(_array(result, "messages", what, required=False)):
        check_message(message, f"{what}.messages[{index}]", strict=False)
    for index, cycle in enumerate(_array(result, "cycles", what, required=False)):
        check_cycle(cycle, f"{what}.cycles[{index}]", strict=False)
    for name in ("completion_reason", "completion_tool_name", "partial_output", "checkpoint_key"):
        _optional_string(result, name, what)
    reason = result.get("completion_reason")
    if reason is not None and reason not in _COMPLETION_REASONS:
        raise invalid(f"unknown terminal_result completion_reason {reason!r}")
    _optional_object(result, "shared_state", what)
    for name in ("budget_usage", "budget_exhaustion", "resume_observation"):
        _optional_object(result, name, what)
    if result.get("budget_usage") is not None:
        check_budget_usage(result["budget_usage"], f"{what}.budget_usage")
    if result_status != status:
        raise invalid("checkpoint terminal_result status must match checkpoint status")
