"""The console's action forms, and the confirmation every action passes through.

Each form posts to ``/act/NAME`` with the thread (and the operation, the
step seen) in the URL and the operator's input in fields named as the
command line's flags (``value``, ``decision``, ``receipt``, ``to``,
``update``...). Nothing is done on that first post: the answer is a page
saying exactly what will happen, whose button (labelled as the action)
posts the same fields again with ``confirm=yes``. None of this is rendered
under ``--read-only``, and the server refuses the posts there too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from agentflow.cli.parser import DECISION_HELP
from agentflow.ui.html import Child, Html, el, link, url
from agentflow.ui.views import ThreadView

__all__ = ["actions", "confirm_main", "error_main"]


def action_url(action: str, thread: str, **query: str | int | None) -> str:
    """Where an action posts: the thread and what it acts on ride in the URL."""
    return url(f"/act/{action}", thread=thread, **query)


def _field(label: str, control: Html, hint: str | None = None) -> Html:
    return el("label", el("span", label), control, el("small", hint) if hint else None)


def _form(action: str, *children: Child, **attrs: Any) -> Html:
    return el("form", *children, method="post", action=action, **attrs)


def _answer(view: ThreadView) -> Html:
    cp = view.latest
    payload = cp.interrupt_payload if isinstance(cp.interrupt_payload, dict) else {}
    choices = payload.get("choices")
    offered = (
        "choices: " + ", ".join(orjson.dumps(c).decode() for c in choices)
        if isinstance(choices, list)
        else None
    )
    value = el("input", type="text", name="value", required=True, placeholder='"approve"')
    return _form(
        action_url("resume", view.thread, step=cp.step),
        el("h3", f"answer {cp.interrupt_node}"),
        _field("value (JSON, as --value)", value, offered),
        el("button", "Resume", type="submit"),
        class_="action",
        id="answer",
    )


def _decide(view: ThreadView, pending: Mapping[str, Any]) -> Html:
    operation = str(pending["operation_id"])
    options = [el("option", name, value=name, title=text) for name, text in DECISION_HELP.items()]
    support = pending["idempotency_support"] or "n/a"
    attempt = pending.get("attempt")  # the decision settles this attempt, no later one
    return _form(
        action_url("reconcile", view.thread, operation=operation, attempt=attempt),
        el(
            "h3",
            "ambiguous call ",
            el("code", operation),
            f" (attempt {attempt})" if attempt else None,
        ),
        el("p", f"{pending['risk']} (idempotency: {support})"),
        _field("decision", el("select", options, name="decision")),
        _field(
            "receipt (JSON)", el("input", type="text", name="receipt"), "with replay_success only"
        ),
        _field("error code", el("input", type="text", name="error_code"), "record_failure, abort"),
        _field("message", el("input", type="text", name="message"), "record_failure, abort"),
        el("button", "Record decision", type="submit"),
        el(
            "dl",
            [(el("dt", name), el("dd", text)) for name, text in DECISION_HELP.items()],
            class_="decisions",
        ),
        class_="action decide",
    )


def _resume(view: ThreadView) -> Html:
    what = (
        "wake it (refused until its timer is due)"
        if view.status == "waiting"
        else "continue it (a run whose process died is taken over once its lease lapses)"
    )
    return _form(
        action_url("resume", view.thread, step=view.latest.step),
        el("h3", "resume"),
        el("p", what),
        el("button", "Resume", type="submit"),
        class_="action",
        id="resume",
    )


def _fork(view: ThreadView, step: int) -> Html:
    return _form(
        action_url("fork", view.thread, step=step),
        el("h3", f"fork at step {step}"),
        _field("new thread id", el("input", type="text", name="to"), "default: THREAD-fork-RANDOM"),
        _field(
            "update (JSON object)",
            el("textarea", name="update", rows=3),
            "folded into the forked state; re-routes",
        ),
        el("label", el("input", type="checkbox", name="keep_route", value="yes"), " keep route"),
        el("button", "Fork", type="submit"),
        class_="action",
        id="fork",
    )


def _delete(view: ThreadView) -> Html:
    force = el("input", type="checkbox", name="force", value="yes")
    return _form(
        action_url("delete", view.thread),
        el("h3", "delete"),
        el("p", "the thread whole: its checkpoints, its durable record, its events"),
        el("label", force, " even while a process holds its lease"),
        el("button", "Delete", type="submit", class_="danger"),
        class_="action",
        id="delete",
    )


def actions(view: ThreadView, fork: int | None) -> Html:
    """The forms that fit the thread's status; a fork form for step ``fork``."""
    offered: list[Html] = []
    if view.status == "interrupted":
        offered.append(_answer(view))
    offered += [_decide(view, pending) for pending in view.pending]
    if view.status in ("running", "waiting") or (
        view.status == "reconciliation_required" and not view.pending
    ):
        offered.append(_resume(view))
    if fork is not None and view.step(fork) is not None:
        offered.append(_fork(view, fork))
    offered.append(_delete(view))
    return el("section", el("h2", "actions"), offered, id="actions")


def confirm_main(
    title: str, what: list[Child], *, action: str, fields: Mapping[str, str], verb: str, back: str
) -> Html:
    """The confirmation of an action: what it will do, then the same post with ``confirm``."""
    hidden = [el("input", type="hidden", name=k, value=v) for k, v in fields.items()]
    return el(
        "section",
        el("h1", title),
        el("div", what, class_="confirm"),
        _form(
            action,
            hidden,
            el("input", type="hidden", name="confirm", value="yes"),
            el("button", verb, type="submit", class_="confirm-button"),
            " ",
            el("a", "Cancel", href=back),
            id="confirm",
        ),
    )


def error_main(message: str, back: str) -> Html:
    """An action that could not be done: why (inert), and the way back."""
    return el(
        "section",
        el("h1", "not done"),
        el("p", message, class_="error", role="alert"),
        link("back", back),
    )
