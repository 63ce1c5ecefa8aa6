"""Opening a store from a URL: the one registry of URL schemes.

Each backend is imported only when its scheme is used, so a missing optional
driver fails only the call that needs it, with the ``pip install`` line that
fixes it. A backend registers here, in :data:`_SCHEMES`, and nowhere else;
a third-party backend calls :func:`register_scheme`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import parse_qsl, quote, quote_plus, unquote, unquote_plus, urlsplit

from agentflow.checkpoint.base import Checkpointer
from agentflow.checkpoint.codec import CheckpointCodec
from agentflow.errors import InvalidStoreUrl

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing
    from agentflow.checkpoint.store import Store

__all__ = [
    "DEFAULT_STORE",
    "SECRET_OPTIONS",
    "StoreOpener",
    "has_password",
    "local_path",
    "open_store",
    "register_scheme",
    "safe_url",
    "scheme_of",
    "server_hosts",
    "without_passwords",
]

#: The store the command line uses when none is named.
DEFAULT_STORE: Final = "sqlite:///.runs/checkpoints.db"

#: Builds a store (or a third party's checkpointer) from a URL and a namespace.
StoreOpener = Callable[..., Checkpointer]

#: scheme -> (module with ``from_url``, optional-dependency extra)
_SCHEMES: Final[dict[str, tuple[str, str | None]]] = {
    "memory": ("agentflow.checkpoint.memory", None),
    "sqlite": ("agentflow.checkpoint.sqlite", None),
    "file": ("agentflow.checkpoint.file", None),
    "postgresql": ("agentflow.checkpoint.postgres", "postgres"),
    "postgres": ("agentflow.checkpoint.postgres", "postgres"),
    "redis": ("agentflow.checkpoint.redis", "redis"),
    "rediss": ("agentflow.checkpoint.redis", "redis"),
    "mongodb": ("agentflow.checkpoint.mongodb", "mongodb"),
    "mongodb+srv": ("agentflow.checkpoint.mongodb", "mongodb"),
}
_REGISTERED: dict[str, StoreOpener] = {}


def register_scheme(scheme: str, opener: StoreOpener) -> None:
    """Let :func:`open_store` open ``scheme://...`` URLs with ``opener(url, namespace=)``
    (and ``codec=``, ``sealing=`` when given, ``create=False`` when asked). An
    opener that returns a plain :class:`~agentflow.checkpoint.base.Checkpointer`
    (no records, no events) gets runs only with ``compile(..., durable=)``."""
    if not scheme.isascii() or not scheme.replace("+", "").isalnum() or scheme.lower() != scheme:
        raise InvalidStoreUrl(f"a scheme is lower-case letters, digits and '+', not {scheme!r}")
    _REGISTERED[scheme] = opener


#: URL query options that carry a credential (or say where one is), as libpq and
#: asyncpg, redis-py and PyMongo read them; compared in lower case.
SECRET_OPTIONS: Final = frozenset(
    {
        "password",
        "passfile",
        "sslpassword",
        "sslkey",
        "tlscertificatekeyfilepassword",
        "authmechanismproperties",
    }
)
#: What a credential is replaced with in a message.
_MASK: Final = "***"


def _userinfo_and_hosts(url: str) -> tuple[str, str]:
    """The ``user:password`` and ``host:port[,host:port]`` parts of ``url``'s netloc
    (read as text: a MongoDB seed list is not one host and port)."""
    userinfo, at, hosts = urlsplit(url).netloc.rpartition("@")
    return (userinfo, hosts) if at else ("", hosts)


def _options(url: str) -> list[tuple[str, str]]:
    """``url``'s query options, decoded, in order (blank values kept)."""
    return parse_qsl(urlsplit(url).query, keep_blank_values=True)


def _secrets(url: str) -> list[str]:
    """Every credential ``url`` carries: the password of its user info and the
    value of each option in :data:`SECRET_OPTIONS` (as written, not decoded)."""
    try:
        userinfo, _ = _userinfo_and_hosts(url)
        query = urlsplit(url).query
    except ValueError:
        return []
    found = [userinfo.partition(":")[2]] if ":" in userinfo else []
    for option in query.split("&"):
        key, _, value = option.partition("=")
        if unquote_plus(key).lower() in SECRET_OPTIONS:
            found.append(value)
    return [secret for secret in found if secret]


def has_password(url: str) -> bool:
    """True when ``url`` carries a credential: a password in its user info
    (``user:pw@``) or an option such as ``?password=``, ``passfile=`` or
    ``sslpassword=`` (:data:`SECRET_OPTIONS`)."""
    return bool(_secrets(url))


def safe_url(url: str) -> str:
    """``url`` without its credentials, for messages and logs: the password of
    its user info and every :data:`SECRET_OPTIONS` option are left out (not
    masked: no form of them is printed); everything else is kept as written."""
    try:
        parts = urlsplit(url)
        userinfo, hosts = _userinfo_and_hosts(url)
    except ValueError:
        return "<unparseable store URL>"
    if not has_password(url):
        return url
    user = userinfo.partition(":")[0]
    netloc = f"{user}@{hosts}" if user else hosts
    kept = [
        option
        for option in parts.query.split("&")
        if option and unquote_plus(option.partition("=")[0]).lower() not in SECRET_OPTIONS
    ]
    text = f"{parts.scheme}://{netloc}{parts.path}"
    text += f"?{'&'.join(kept)}" if kept else ""
    return text + (f"#{parts.fragment}" if parts.fragment else "")


def without_passwords(message: str, urls: Sequence[str]) -> str:
    """``message`` with every credential of each of ``urls`` masked, in every
    form a driver or a re-encoded URL may quote it (as written, decoded,
    percent-encoded)."""
    forms: set[str] = set()
    for url in urls:
        for secret in _secrets(url):
            for plain in (secret, unquote(secret), unquote_plus(secret)):
                forms.update({plain, quote(plain, safe=""), quote_plus(plain, safe="")})
    for form in sorted(forms - {""}, key=len, reverse=True):
        message = message.replace(form, _MASK)
    return message


def server_hosts(url: str) -> str:
    """Where a server URL points, without credentials: its ``host:port`` list, or
    for a host-less PostgreSQL URL (``postgresql:///db?host=/run/postgresql``)
    its ``host`` option (a socket directory), else ``localhost``."""
    hosts = _userinfo_and_hosts(url)[1]
    if hosts:
        return hosts
    options = dict((key.lower(), value) for key, value in _options(url))
    host = options.get("host") or "localhost"
    return f"{host}:{options['port']}" if options.get("port") else host


def local_path(url: str) -> Path | None:
    """Where a ``sqlite:///`` or ``file://`` store lives; None for a server URL.

    ``sqlite:///runs.db`` is relative and ``sqlite:////tmp/runs.db`` absolute,
    as in SQLAlchemy; ``file://`` is followed directly by the directory.
    """
    scheme = scheme_of(url)
    if scheme not in ("sqlite", "file"):
        return None
    rest = url.split("://", 1)[1]
    path = rest[1:] if scheme == "sqlite" and rest.startswith("/") else rest
    if not path:
        raise InvalidStoreUrl(f"store URL {url!r} names no path")
    return Path(path)


def scheme_of(url: object) -> str:
    """The lower-cased scheme of ``url``; raises InvalidStoreUrl when it has none."""
    if not isinstance(url, str) or "://" not in url:
        shown = safe_url(url) if isinstance(url, str) else url
        raise InvalidStoreUrl(f"a store URL looks like scheme://..., got {shown!r:.80}")
    return url.split("://", 1)[0].lower()


def _opener(scheme: str, url: str) -> StoreOpener:
    registered = _REGISTERED.get(scheme)
    if registered is not None:
        return registered
    if scheme not in _SCHEMES:
        known = ", ".join(sorted({*_SCHEMES, *_REGISTERED}))
        raise InvalidStoreUrl(f"unsupported store URL {safe_url(url)!r}; known schemes: {known}")
    module_name, extra = _SCHEMES[scheme]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = (
            f"; install it with: pip install 'agentflow-durable[{extra}]' "
            f"(from a clone: pip install -e '.[{extra}]')"
            if extra
            else ""
        )
        raise InvalidStoreUrl(f"the {scheme} backend is not available ({exc}){hint}") from exc
    opener: StoreOpener = module.from_url
    return opener


def open_store(
    url: str,
    *,
    namespace: str | None = None,
    sealing: KeyRing | None = None,
    codec: CheckpointCodec | None = None,
    create: bool = True,
) -> Store:
    """The store at ``url``, bound to ``namespace``: one object holding every
    thread's checkpoints, durable record and events there; the caller closes it.

    ``memory://NAME`` (one in-process store per name), ``sqlite:///PATH``
    (``sqlite:////abs/path`` for an absolute one), ``file://DIR``,
    ``postgresql://...``, ``redis://...`` and ``mongodb://...``.

    ``sealing`` (a :class:`~agentflow.checkpoint.sealing.KeyRing`) seals
    every checkpoint, record and event; ``codec`` encodes the checkpoints
    (default JSON). With ``create=False`` (read-only callers) a store whose
    file, directory, tables, keys or collection do not exist raises
    :class:`~agentflow.errors.StoreNotFound`, on its first call at the latest,
    and nothing is created.
    """
    opener = _opener(scheme_of(url), url)
    options: dict[str, object] = {"namespace": namespace}
    if codec is not None:  # a registered third-party opener need take neither
        options["codec"] = codec
    if sealing is not None:
        options["sealing"] = sealing
    if not create:
        options["create"] = False
    store = opener(url, **options)
    return store  # type: ignore[return-value]  # a registered third party may return less
