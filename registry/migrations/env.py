"""Alembic environment: bctflow runs migrations on a connection it opened (:mod:`registry.schema_version`), or from the
``alembic`` command line with ``-x url=<SQLAlchemy URL>`` (maintainers writing a new revision)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from registry.orm import Base

config = context.config
connection = config.attributes.get("connection")


def _run(conn) -> None:
    # batch mode: SQLite cannot ALTER most things; Alembic copies the table instead
    context.configure(connection=conn, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


if connection is not None:
    _run(connection)
else:
    url = context.get_x_argument(as_dictionary=True).get("url")
    if not url:
        raise SystemExit("pass the database: alembic -x url=sqlite:///path/lineage.db <command>")
    with create_engine(url).connect() as conn:
        _run(conn)
        conn.commit()
