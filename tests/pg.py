"""A throwaway PostgreSQL server for the storage tests (PITFALLS.md: initdb as user postgres)."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path


def _free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_postgres(cmd: list[str]) -> list[str]:
    """Run as the postgres user when we are root (initdb refuses root)."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


class Server:
    """Start/stop a server in a temporary folder; `url(db)` for SQLAlchemy."""

    def __init__(self) -> None:
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not bins:
            raise FileNotFoundError("no PostgreSQL server binaries in /usr/lib/postgresql/*/bin")
        self.bin = Path(bins[-1]).parent
        self.dir = Path(tempfile.mkdtemp(prefix="wb-pg-"))
        self.port = _free_port()

    def start(self) -> Server:
        """initdb + pg_ctl start (about 1-2 s)."""
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")
        data = self.dir / "data"
        subprocess.run(
            _as_postgres([str(self.bin / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]),
            check=True,
            capture_output=True,
        )
        opts = f"-h 127.0.0.1 -p {self.port} -k {self.dir} -c fsync=off -c max_connections=200"
        subprocess.run(
            _as_postgres(
                [str(self.bin / "pg_ctl"), "-D", str(data), "-l", str(self.dir / "log"), "-w", "start", "-o", opts]
            ),
            check=True,
            capture_output=True,
        )
        return self

    def stop(self) -> None:
        """Stop the server and remove its files."""
        subprocess.run(
            _as_postgres([str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-m", "immediate", "stop"]),
            capture_output=True,
        )
        shutil.rmtree(self.dir, ignore_errors=True)

    def base_url(self) -> str:
        """URL of the maintenance database."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"


def fresh_database(base_url: str) -> str:
    """Create a new empty database on the server and return its URL."""
    import sqlalchemy

    name = "wb_" + uuid.uuid4().hex[:12]
    engine = sqlalchemy.create_engine(base_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return base_url.rsplit("/", 1)[0] + "/" + name
