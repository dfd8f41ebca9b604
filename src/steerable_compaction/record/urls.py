"""Which records are named by URL: PostgreSQL's (`postgresql://...`), the rest by file path.

Its own module, below both `stores` (which opens a record by what it names) and `postgres`
(which parses the URL), so neither imports the other to ask.
"""

from __future__ import annotations

__all__ = ["is_postgres_url"]

_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(spec: object) -> bool:
    """Whether `spec` names a PostgreSQL database (`postgresql://...` or `postgres://...`)."""
    return isinstance(spec, str) and spec.lower().startswith(_SCHEMES)
