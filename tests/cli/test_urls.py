"""Store URLs in output: every form of credential drivers accept is found and never shown.

asyncpg (libpq's URL rules), redis-py and PyMongo take a password in the user
info and in query options (``?password=``, ``passfile=``, ``sslpassword=``,
``tlsCertificateKeyFilePassword=``...), and PostgreSQL URLs may name no host
at all (``postgresql:///db?host=/run/postgresql``). A driver's error may quote
the URL as given, decoded or re-encoded.
"""

from __future__ import annotations

from urllib.parse import quote, quote_plus

import pytest

from agentflow.checkpoint.stores import (
    has_password,
    safe_url,
    scheme_of,
    server_hosts,
    without_passwords,
)
from agentflow.errors import InvalidStoreUrl

SECRET = "S3cr3t pw/@:%!"
ENCODED = quote(SECRET, safe="")
PATH = f"/home/{SECRET}"
TOKEN = f"AWS_SESSION_TOKEN:{SECRET}"
#: (URL, the URL shown instead, the credential it carries as the driver reads it).
FORMS = [
    (f"postgresql://me:{ENCODED}@db:5432/x", "postgresql://me@db:5432/x", SECRET),
    (f"postgresql://:{ENCODED}@db/x", "postgresql://db/x", SECRET),
    (
        f"postgres://me@db/x?password={ENCODED}&sslmode=require",
        "postgres://me@db/x?sslmode=require",
        SECRET,
    ),
    (f"postgresql://me@db/x?PASSWORD={ENCODED}", "postgresql://me@db/x", SECRET),
    (f"postgresql:///x?host=/run/pg&password={ENCODED}", "postgresql:///x?host=/run/pg", SECRET),
    (f"postgresql://me@db/x?passfile={quote(PATH)}", "postgresql://me@db/x", PATH),
    (f"postgresql://me@db/x?sslpassword={ENCODED}&sslkey=/k", "postgresql://me@db/x", SECRET),
    (f"redis://:{ENCODED}@h:6379/0", "redis://h:6379/0", SECRET),
    (f"rediss://h:6380/0?password={quote_plus(SECRET)}", "rediss://h:6380/0", SECRET),
    (
        f"mongodb://me:{ENCODED}@a:1,b:2/db?replicaSet=rs",
        "mongodb://me@a:1,b:2/db?replicaSet=rs",
        SECRET,
    ),
    (
        f"mongodb://a/?tls=true&tlsCertificateKeyFilePassword={ENCODED}",
        "mongodb://a/?tls=true",
        SECRET,
    ),
    (
        f"mongodb://a/?authMechanism=MONGODB-AWS&authMechanismProperties={quote(TOKEN)}",
        "mongodb://a/?authMechanism=MONGODB-AWS",
        TOKEN,
    ),
]


@pytest.mark.parametrize(("url", "shown", "credential"), FORMS, ids=[f[0] for f in FORMS])
def test_every_credential_form_is_found_and_left_out(url: str, shown: str, credential: str) -> None:
    assert has_password(url)
    assert safe_url(url) == shown
    assert not has_password(shown) and safe_url(shown) == shown
    # What a driver may quote: the URL as given, the credential decoded or re-encoded.
    quoted = [credential, quote(credential, safe=""), quote_plus(credential, safe="")]
    masked = without_passwords(f"driver said: {url} / {' / '.join(quoted)} / {shown}", [url])
    assert "S3cr3t" not in masked
    assert masked.endswith(f"/ {shown}")


def test_urls_without_credentials_are_shown_as_written() -> None:
    for url in (
        "postgresql://me@db/x?sslmode=require&application_name=a%20b",
        "postgresql:///x?host=/run/postgresql",
        "redis://h:6379/0",
        "sqlite:///.runs/checkpoints.db",
    ):
        assert not has_password(url) and safe_url(url) == url
        assert without_passwords(f"at {url}", [url]) == f"at {url}"


def test_where_a_host_less_postgresql_url_points() -> None:
    assert server_hosts("postgresql:///x?host=/run/postgresql&port=5433") == "/run/postgresql:5433"
    assert server_hosts("postgresql:///x") == "localhost"
    assert server_hosts("postgresql://me:pw@db:5432,db2/x") == "db:5432,db2"


def test_a_url_refused_for_its_shape_is_quoted_without_its_password() -> None:
    with pytest.raises(InvalidStoreUrl) as refused:
        scheme_of(f"postgresql:/x?password={ENCODED}")
    assert "S3cr3t" not in str(refused.value)
