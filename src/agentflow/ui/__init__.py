"""The operator's console: ``agentflow ui``, a local web page over one store.

It lists threads, shows a thread's timeline, journal, lease and events, and
(unless ``--read-only``) answers interrupts, settles ambiguous calls, resumes,
forks and deletes through the same functions the command line runs. The web
stack (Starlette, uvicorn) is the ``ui`` extra, imported only when the console
starts (:mod:`agentflow.ui.command`); every asset ships in this package.
"""
