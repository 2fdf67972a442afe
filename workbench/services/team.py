"""Teams: local accounts and roles, the audit trail, allowed endpoints, moving a study to PostgreSQL.

Passwords are hashed with argon2 (argon2-cffi: salted, memory-hard, maintained); roles are
enforced here in the services layer, so the CLI, the app and any script obey the same rules.
"""

from __future__ import annotations

import re

import pandas as pd
from workbench.services.study import ROLES, Actor, PermissionDenied
from workbench.store import db, queries as q
from workbench.store.transfer import copy_tables, is_empty
from workbench.store.tables import User
from workbench.study import StudyError

USER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$")
MIN_PASSWORD = 8


def _hasher():
    """The argon2 password hasher (imported lazily: it is only needed for sign-in)."""
    from argon2 import PasswordHasher

    return PasswordHasher()


class TeamService:
    """Users, sign-in, audit, governance, database migration."""

    # ------------------------------------------------------------ users

    def add_user(self, user_id: str, role: str, password: str | None = None, name: str = "", email: str = "") -> None:
        """Create a local account (admins only, except the very first account, which must be an admin)."""
        if role not in ROLES:
            raise StudyError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        if not USER_ID.match(user_id):
            raise StudyError(f"user id {user_id!r}: letters, digits, '.', '_', '@', '-' only")
        with self.session() as s:
            first = q.count_rows(s, User) == 0
        if first and role != "admin":
            raise StudyError("the first account must be an admin (it manages the others)")
        if not first:
            self.require("manage_users")
        if password is not None and len(password) < MIN_PASSWORD:
            raise StudyError(f"a password needs at least {MIN_PASSWORD} characters")
        digest = _hasher().hash(password) if password else ""
        with self.session() as s:
            if q.get_user(s, user_id) is not None:
                raise StudyError(f"user {user_id!r} already exists")
            s.add(User(id=user_id, name=name, email=email, role=role, password_hash=digest, created_at=q.now()))
            q.add_audit(s, self.actor.user, "add", "user", user_id, None, {"role": role, "name": name, "email": email})

    def set_role(self, user_id: str, role: str) -> None:
        """Change a user's role (admins only)."""
        self.require("manage_users")
        if role not in ROLES:
            raise StudyError(f"role must be one of {', '.join(ROLES)}")
        with self.session() as s:
            user = q.get_user(s, user_id)
            if user is None:
                raise StudyError(f"no user {user_id!r}")
            old = user.role
            user.role = role
            s.add(user)
            q.add_audit(s, self.actor.user, "change", "user", user_id, {"role": old}, {"role": role})

    def users(self) -> pd.DataFrame:
        """Accounts (without password hashes)."""
        with self.session() as s:
            return q.list_users(s)

    def authenticate(self, user_id: str, password: str) -> Actor:
        """Check a local password; returns the Actor to act as. Same message for every failure."""
        from argon2.exceptions import InvalidHashError, VerificationError

        with self.session() as s:
            user = q.get_user(s, user_id)
        failure = PermissionDenied("unknown user or wrong password")
        if user is None or not user.password_hash:
            raise failure
        try:
            _hasher().verify(user.password_hash, password)
        except (VerificationError, InvalidHashError):
            raise failure from None
        return Actor(user=user.id, role=user.role, name=user.name, email=user.email)

    def actor_for(self, user_id: str) -> Actor:
        """The Actor of a known user (OIDC sign-in: the identity provider checked the password)."""
        with self.session() as s:
            user = q.get_user(s, user_id)
        if user is None:
            raise PermissionDenied(f"{user_id} has no account in this study; an admin adds it with `workbench user add`")
        return Actor(user=user.id, role=user.role, name=user.name, email=user.email)

    # ------------------------------------------------------------ audit

    def audit_log(self, entity: str | None = None, key: str | None = None, limit: int = 5000) -> pd.DataFrame:
        """The append-only audit trail, newest first."""
        self.require("see_unblinded")
        with self.session() as s:
            return q.list_audit(s, entity=entity, key=key, limit=limit)

    # ------------------------------------------------------------ governance

    def allow_endpoint(self, prefix: str) -> None:
        """Allow report text to be sent to an endpoint (admins only; recorded in the audit trail)."""
        self.require("settings")
        prefix = prefix.strip()
        if not prefix:
            raise StudyError("give the endpoint URL (or URL prefix) to allow")
        if prefix not in self.config.allowed_endpoints:
            old = list(self.config.allowed_endpoints)
            self.config.allowed_endpoints.append(prefix)
            self.save_config()
            with self.session() as s:
                q.add_audit(s, self.actor.user, "allow", "endpoint", prefix, {"allowed": old}, {"allowed": self.config.allowed_endpoints})

    def disallow_endpoint(self, prefix: str) -> None:
        """Stop allowing an endpoint."""
        self.require("settings")
        if prefix in self.config.allowed_endpoints:
            old = list(self.config.allowed_endpoints)
            self.config.allowed_endpoints.remove(prefix)
            self.save_config()
            with self.session() as s:
                q.add_audit(s, self.actor.user, "disallow", "endpoint", prefix, {"allowed": old}, {"allowed": self.config.allowed_endpoints})

    # ------------------------------------------------------------ moving the database

    def migrate_database(self, to_url: str, switch: bool = True) -> pd.DataFrame:
        """Copy every table to another database (e.g. PostgreSQL); compare row counts and checksums.

        The target must be empty. The study switches to the new URL only when every table matches.
        """
        self.require("settings")
        target = db.make_engine(to_url)
        try:
            if not is_empty(target):
                raise StudyError("the target database is not empty; give an empty database")
            db.migrate(target)
            report = copy_tables(self.engine, target)
        finally:
            target.dispose()
        if not report["match"].all():
            raise StudyError("copy mismatch; the study still uses its old database:\n" + report.to_string(index=False))
        if switch:
            with self.session() as s:
                q.add_audit(s, self.actor.user, "migrate", "database", "url", {"url": _redact(self.url)}, {"url": _redact(to_url)})
            self.config.database = to_url
            self.save_config()
        return report


def _redact(url: str) -> str:
    """A URL without its password."""
    return re.sub(r"://([^:/@]+):[^@]+@", r"://\1:***@", url)


