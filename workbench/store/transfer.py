"""Copy a study's database to another engine (SQLite -> PostgreSQL), verified by counts and checksums."""

from __future__ import annotations

import hashlib
import json

import pandas as pd
from sqlalchemy import MetaData, String, Table, Text, func, inspect, select, text
from sqlmodel import SQLModel


def is_empty(engine) -> bool:
    """True when a database has no tables."""
    return not inspect(engine).get_table_names()


def _checksum(conn, table: Table) -> str:
    """sha256 over a table's rows in primary-key order, values in a canonical text form."""
    order = list(table.primary_key.columns) or list(table.columns)
    digest = hashlib.sha256()
    for row in conn.execute(select(table).order_by(*order)):
        digest.update(json.dumps([_canon(v) for v in row], default=str).encode())
    return digest.hexdigest()


def _canon(value):
    """Booleans and integers compare equal across SQLite and PostgreSQL."""
    if isinstance(value, bool):
        return int(value)
    return value


def find_nul_text(source, limit: int = 10) -> list[str]:
    """Where a text value holds a NUL character (PostgreSQL refuses it), as 'report s3, column findings'.

    Old studies may have one: the importers refuse them now. Only string columns are read, in pages.
    """
    found: list[str] = []
    with source.connect() as conn:
        for table in SQLModel.metadata.sorted_tables:
            columns = [c for c in table.columns if isinstance(c.type, (String, Text))]
            pk = list(table.primary_key.columns)
            if not columns or not pk:
                continue
            for row in conn.execute(select(*pk, *columns)):
                for col, value in zip(columns, row[len(pk) :], strict=False):
                    if isinstance(value, str) and "\x00" in value:
                        key = ", ".join(str(v) for v in row[: len(pk)])
                        found.append(f"{table.name} {key}, column {col.name}")
                        if len(found) >= limit:
                            return found
    return found


def copy_tables(source, target) -> pd.DataFrame:
    """Copy all rows table by table (parents first); return counts and checksums side by side."""
    rows = []
    metadata = SQLModel.metadata
    with source.connect() as src, target.begin() as dst:
        for table in metadata.sorted_tables:
            data = [dict(r._mapping) for r in src.execute(select(table))]
            if table.name == "meta":
                dst.execute(table.delete())
            for i in range(0, len(data), 5000):
                dst.execute(table.insert(), data[i : i + 5000])
        _reset_sequences(dst, metadata)
    with source.connect() as src, target.connect() as dst:
        for table in metadata.sorted_tables:
            n_src = src.execute(select(func.count()).select_from(table)).scalar()
            n_dst = dst.execute(select(func.count()).select_from(table)).scalar()
            c_src, c_dst = _checksum(src, table), _checksum(dst, table)
            rows.append(
                {
                    "table": table.name,
                    "rows_source": n_src,
                    "rows_target": n_dst,
                    "checksum_source": c_src[:16],
                    "checksum_target": c_dst[:16],
                    "match": n_src == n_dst and c_src == c_dst,
                }
            )
    return pd.DataFrame(rows)


def _reset_sequences(conn, metadata: MetaData) -> None:
    """PostgreSQL: move id sequences past the copied ids so new rows do not collide."""
    if conn.dialect.name != "postgresql":
        return

    for table in metadata.sorted_tables:
        pk = list(table.primary_key.columns)
        try:
            is_int = pk[0].type.python_type is int if len(pk) == 1 else False
        except NotImplementedError:
            is_int = False
        if is_int:
            conn.execute(
                text(
                    f"SELECT setval(pg_get_serial_sequence('{table.name}', '{pk[0].name}'), "
                    f"COALESCE((SELECT MAX({pk[0].name}) FROM {table.name}), 0) + 1, false)"
                )
            )
