"""Persistence under the data directory: one SQLite file for node, switch and fabric-manager state
and issued certificates.

SQLite commits are atomic, so a crash never leaves half a state; node and switch rows are written
in batches by the debounced flusher in `server.py`, so a burst of requests costs one commit.
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from pathlib import Path

STATE_TABLES = ("nodes", "switches", "fabrics")


def atomic_write(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write a whole file or nothing: a temp file in the same directory, then rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


class Store:
    def __init__(self, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(directory / "state.sqlite3", isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        for table in STATE_TABLES:
            self._db.execute(f"CREATE TABLE IF NOT EXISTS {table} (name TEXT PRIMARY KEY, state TEXT NOT NULL)")
        self._db.execute("CREATE TABLE IF NOT EXISTS certs (label TEXT PRIMARY KEY, pem TEXT NOT NULL)")

    def load(self, table: str) -> dict[str, dict]:
        """Every row of a STATE_TABLES table: name -> state."""
        return {name: json.loads(state) for name, state in self._db.execute(f"SELECT name, state FROM {table}")}

    def save(self, states: dict[str, dict[str, dict]]) -> None:
        """Write {table: {name: state}} in one commit."""
        with self._db:
            self._db.execute("BEGIN")
            for table, rows in states.items():
                self._db.executemany(
                    f"INSERT OR REPLACE INTO {table} (name, state) VALUES (?, ?)",
                    [(name, json.dumps(state, separators=(",", ":"))) for name, state in rows.items()],
                )

    def get_cert(self, label: str) -> str | None:
        row = self._db.execute("SELECT pem FROM certs WHERE label = ?", (label,)).fetchone()
        return row[0] if row else None

    def put_cert(self, label: str, pem: str) -> None:
        self._db.execute("INSERT OR REPLACE INTO certs (label, pem) VALUES (?, ?)", (label, pem))

    def close(self) -> None:
        self._db.close()
