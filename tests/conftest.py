"""Test configuration: Hypothesis profiles (`HYPOTHESIS_PROFILE=ci` is derandomized).

PostgreSQL: `STEERABLE_TEST_POSTGRES` names a server's database; without it those cases skip.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from .record_sessions import NO_POSTGRES, POSTGRES_URL, in_schema, new_schema_name

settings.register_profile("dev", deadline=None)
settings.register_profile(
    "ci", deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A URL whose records land in a schema of their own, dropped after the test run.

    Skips (naming `STEERABLE_TEST_POSTGRES`) when no server is configured.
    """
    if POSTGRES_URL is None:
        pytest.skip(NO_POSTGRES)
    with fresh_schema(POSTGRES_URL) as url:
        yield url


@contextlib.contextmanager
def fresh_schema(url: str) -> Iterator[str]:
    """`url` pointed at a new, empty schema, dropped (with what it holds) on exit."""
    import psycopg

    schema = new_schema_name()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield in_schema(url, schema)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
