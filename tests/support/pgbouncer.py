"""PgBouncer in transaction mode in front of the test cluster (``.ci/with-postgres``).

``SIGNOFF_TEST_PGBOUNCER_URL`` names the pooler; every database of the cluster is reached
through it under its own name. Without the variable the tests that also run through the
pooler skip, except under ``CI=true``, where they fail: CI installs PgBouncer.
"""

from __future__ import annotations

import os

import pytest
from sqlalchemy.engine import make_url

ENV = "SIGNOFF_TEST_PGBOUNCER_URL"

ROUTES = ["direct", "pgbouncer"]
"""How a test reaches PostgreSQL: straight to the cluster, or through PgBouncer."""


def require_pgbouncer() -> str:
    """The pooler's URL; skips the test without one (fails it under ``CI=true``)."""
    url = os.environ.get(ENV)
    if url:
        return url
    message = (
        f"PgBouncer tests need {ENV} (`.ci/with-postgres` sets it when Debian's pgbouncer "
        "is installed)"
    )
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI=true but {message}", pytrace=False)
    pytest.skip(message)


def through_pgbouncer(direct_url: str) -> str:
    """The URL of the same database as `direct_url`, through the pooler."""
    bouncer = make_url(require_pgbouncer())
    direct = make_url(direct_url)
    return direct.set(host=bouncer.host, port=bouncer.port).render_as_string(hide_password=False)


def pooled_settings(direct_url: str) -> dict[str, str]:
    """The settings of a `signoff serve` whose transactions go through the pooler."""
    return {
        "SIGNOFF_DATABASE_URL": through_pgbouncer(direct_url),
        "SIGNOFF_DATABASE_POOLER": "transaction",
        "SIGNOFF_DATABASE_LISTEN_URL": direct_url,
    }
