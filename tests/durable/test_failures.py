"""The original's classification of a started call's failure: definitive or ambiguous."""

from __future__ import annotations

import asyncio

import pytest

from agentflow.durable import (
    AMBIGUOUS_TOOL_ERROR_CODES,
    OperationError,
    OperationKind,
    definitive_failure,
)


class ProviderError(Exception):
    """Stands for an SDK's error: a message and, sometimes, a string ``code``."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class ToolError(Exception):
    """A tool's typed failure, as its author raises it."""

    def __init__(
        self,
        message: str = "",
        *,
        error_code: str | None = None,
        definitive_outcome: bool | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.definitive_outcome = definitive_outcome
        self.retryable = retryable


@pytest.mark.parametrize(
    "error",
    [
        ProviderError("This model's maximum context length is 8192 tokens"),
        ProviderError("Error code: 400", code="context_length_exceeded"),
        ProviderError("prompt is too long: 210000 tokens > 200000 maximum"),
        ProviderError("413 Request Too Large"),
        ProviderError("input exceeds the CONTEXT LENGTH"),
    ],
)
def test_a_refused_model_request_is_definitive(error: Exception) -> None:
    assert definitive_failure(OperationKind.MODEL, error) == OperationError(
        "model_request_failed", str(error), False
    )


@pytest.mark.parametrize(
    "error",
    [
        TimeoutError(),
        ConnectionResetError("connection reset by peer"),
        asyncio.CancelledError(),
        ProviderError("Internal server error", code="server_error"),
        ProviderError("rate limited"),
    ],
)
def test_anything_else_a_model_raises_is_ambiguous(error: BaseException) -> None:
    assert definitive_failure("model", error) is None


def test_a_tool_failure_is_definitive_only_when_the_tool_says_so() -> None:
    rejected = ToolError("no such account", error_code="account_not_found", retryable=True)
    assert definitive_failure("tool", rejected) == OperationError(
        "account_not_found", "no such account", True
    )
    proved = ToolError(error_code="tool_timeout", definitive_outcome=True)
    assert definitive_failure("tool", proved) == OperationError(
        "tool_timeout", "tool operation failed", False
    )
    flagged = ToolError("declined", definitive_outcome=True)
    assert definitive_failure("tool", flagged) == OperationError(
        "tool_operation_failed", "declined", False
    )
    for code in sorted(AMBIGUOUS_TOOL_ERROR_CODES):
        assert definitive_failure("tool", ToolError("lost", error_code=code)) is None
    for error in (RuntimeError("boom"), ValueError("bad"), ToolError("x", error_code=" ")):
        assert definitive_failure("tool", error) is None  # nobody said the effect did not happen


def test_an_explicit_ambiguity_wins_over_the_markers() -> None:
    unsure = ToolError("maximum context length exceeded", definitive_outcome=False)
    assert definitive_failure("model", unsure) is None
    assert (
        definitive_failure("tool", ToolError(error_code="denied", definitive_outcome=False)) is None
    )
    sure = ToolError("upstream said no", definitive_outcome=True)
    assert definitive_failure("model", sure) == OperationError(
        "model_request_failed", "upstream said no", False
    )
