"""Least privilege in PostgreSQL: an owner role for migrations, an application role that
cannot rewrite the audit trail.

The append-only triggers on the audit tables reject UPDATE and DELETE whoever issues
them, but a table's owner (or a superuser) can drop a trigger or TRUNCATE the table.
So the application connects as a role that owns nothing: it has DML on the ordinary
tables and only SELECT/INSERT on the append-only ones (no UPDATE, DELETE, TRUNCATE; not
the owner, so no ALTER/DROP TRIGGER). Migrations run as the owner role.

- ``cacheplane up`` (embedded PostgreSQL) creates both roles (``roles_ensure``) and runs
  ``app_role_grant`` after every migrate.
- Production: create the roles yourself (docs/operations/production.md), migrate with
  ``DATABASE_MIGRATE_URL`` (the owner) and run ``cacheplane db-grant ROLE`` after each
  migrate; the application's ``DATABASE_URL`` names the application role.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from psycopg import sql

if TYPE_CHECKING:
    from django.db.backends.utils import CursorWrapper

#: Tables the application may read and append to but never change; any table carrying a
#: trigger named ``*_append_only`` is added (a later append-only table is covered too).
APPEND_ONLY_TABLES = ("audit_auditevent", "audit_auditdigest")

_APPEND_ONLY_TRIGGER_TABLES = """
SELECT DISTINCT c.relname FROM pg_trigger t
JOIN pg_class c ON c.oid = t.tgrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND NOT t.tgisinternal AND t.tgname LIKE %s
"""


def roles_ensure(*, host: str, database: str, owner: str, app: str) -> None:
    """Create the owner and application roles (LOGIN, no password: the embedded server
    listens on a private unix socket with trust auth) and hand the database to the owner.

    Idempotent. A data dir made before roles existed has tables owned by ``postgres``:
    they are given to the owner, so the application role never owns anything.
    """
    import psycopg

    with psycopg.connect(dbname="postgres", host=host, user="postgres", autocommit=True) as conn:
        for role in (owner, app):
            if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(
            sql.SQL("ALTER DATABASE {} OWNER TO {}").format(
                sql.Identifier(database), sql.Identifier(owner)
            )
        )
    with psycopg.connect(dbname=database, host=host, user="postgres", autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER SCHEMA public OWNER TO {}").format(sql.Identifier(owner)))
        stale = conn.execute(
            "SELECT c.relname, c.relkind FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'v', 'm', 'p') "
            "AND pg_get_userbyid(c.relowner) <> %s",
            (owner,),
        ).fetchall()
        for name, kind in stale:
            # Sequences owned by a table's column follow the table.
            keyword = "VIEW" if kind == "v" else "MATERIALIZED VIEW" if kind == "m" else "TABLE"
            conn.execute(
                sql.SQL("ALTER {} {} OWNER TO {}").format(
                    sql.SQL(keyword), sql.Identifier(name), sql.Identifier(owner)
                )
            )
        conn.execute(
            sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(
                sql.Identifier(database), sql.Identifier(app)
            )
        )
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(sql.Identifier(app)))
        # Tables a migration creates are usable by the application at once (a data
        # migration that goes through the default alias writes as the application role);
        # app_role_grant then takes UPDATE/DELETE/TRUNCATE back on the append-only ones.
        conn.execute(
            sql.SQL(
                "ALTER DEFAULT PRIVILEGES FOR ROLE {} IN SCHEMA public "
                "GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {}"
            ).format(sql.Identifier(owner), sql.Identifier(app))
        )
        conn.execute(
            sql.SQL(
                "ALTER DEFAULT PRIVILEGES FOR ROLE {} IN SCHEMA public "
                "GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO {}"
            ).format(sql.Identifier(owner), sql.Identifier(app))
        )
        # The application role creates nothing (PostgreSQL 15+ already denies PUBLIC).
        conn.execute(sql.SQL("REVOKE CREATE ON SCHEMA public FROM {}").format(sql.Identifier(app)))


def app_role_grant(*, cursor: CursorWrapper, role: str) -> list[str]:
    """Grant ``role`` what the application needs on every current table, minus UPDATE,
    DELETE and TRUNCATE on the append-only tables. Run as the tables' owner after each
    migrate (idempotent). Returns the append-only tables it restricted."""
    ident = sql.Identifier(role)
    cursor.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(ident))
    cursor.execute(
        sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {}").format(
            ident
        )
    )
    cursor.execute(
        sql.SQL("GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO {}").format(ident)
    )
    cursor.execute(_APPEND_ONLY_TRIGGER_TABLES, ("%append_only",))
    tables = sorted({*APPEND_ONLY_TABLES, *(row[0] for row in cursor.fetchall())})
    cursor.execute(
        "SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'public' AND relname = ANY(%s)",
        (tables,),
    )
    present = sorted(row[0] for row in cursor.fetchall())
    for table in present:
        cursor.execute(
            sql.SQL("REVOKE UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON {} FROM {}").format(
                sql.Identifier(table), ident
            )
        )
    return present


def app_role_default_privileges(*, cursor: CursorWrapper, role: str) -> None:
    """Let ``role`` use what the connected owner creates from now on (tables, sequences).

    Run as the owner before migrating: a data migration reads and writes through the
    default alias, i.e. as the application role, on tables the same run just created.
    ``app_role_grant`` takes UPDATE/DELETE/TRUNCATE back on the append-only ones after.
    Idempotent.
    """
    ident = sql.Identifier(role)
    cursor.execute(
        sql.SQL(
            "ALTER DEFAULT PRIVILEGES IN SCHEMA public "
            "GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {}"
        ).format(ident)
    )
    cursor.execute(
        sql.SQL(
            "ALTER DEFAULT PRIVILEGES IN SCHEMA public "
            "GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO {}"
        ).format(ident)
    )


def app_role_default_privileges_configured() -> str | None:
    """``app_role_default_privileges`` as the ``migrate`` alias for the role of
    ``DATABASE_URL``; None when no separate owner is configured."""
    from django.db import connections

    if "migrate" not in connections:
        return None
    owner = connections["migrate"]
    role = connections["default"].settings_dict.get("USER") or ""
    if not role or role == owner.settings_dict.get("USER"):
        return None
    with owner.cursor() as cursor:
        app_role_default_privileges(cursor=cursor, role=role)
    return role


def app_role_grant_configured(*, role: str | None = None) -> tuple[str, list[str]] | None:
    """``app_role_grant`` through the configured databases: as the ``migrate`` alias
    (``DATABASE_MIGRATE_URL``, the owner) for the role ``DATABASE_URL`` connects as, or
    ``role``. None when there is nothing to do (no separate owner and no role given)."""
    from django.db import connections

    owner = connections["migrate"] if "migrate" in connections else connections["default"]
    role = role or connections["default"].settings_dict.get("USER") or ""
    if not role or role == owner.settings_dict.get("USER"):
        return None
    with owner.cursor() as cursor:
        return role, app_role_grant(cursor=cursor, role=role)
