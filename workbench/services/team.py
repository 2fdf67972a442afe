"""Teams: local accounts and roles, the audit trail, allowed endpoints, moving a study to PostgreSQL.

Passwords are hashed with argon2 (argon2-cffi: salted, memory-hard, maintained); roles are
enforced here in the services layer, so the CLI, the app and any script obey the same rules.
Sign-in failures look alike and take alike (no user enumeration) and back off in the database.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import re
import secrets
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import pandas as pd
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from workbench import bundle as bundle_mod
from workbench.labeller import endpoints
from workbench.services.base import Service, StudyContext
from workbench.services.study import ROLES, Actor, PermissionDenied
from workbench.store import db, prompt_repo
from workbench.store import queries as q
from workbench.store.tables import User
from workbench.store.transfer import copy_tables, find_nul_text, is_empty
from workbench.study import StudyError, refuse_password_in_url

if TYPE_CHECKING:  # collaborators' types, for readers and type checkers only
    from workbench.services.study import StudyService

USER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$")
MIN_PASSWORD = 12
# a short list of the passwords tried first by every guessing attack (compared case-insensitively)
COMMON_PASSWORDS = frozenset(
    {
        "password",
        "password1",
        "password12",
        "password123",
        "password1234",
        "passwordpassword",
        "123456789012",
        "1234567890123",
        "qwertyuiopas",
        "qwerty123456",
        "qwertyuiop123",
        "111111111111",
        "000000000000",
        "iloveyou1234",
        "letmeinletmein",
        "welcome12345",
        "administrator",
        "admin1234567",
        "changeme1234",
        "abcdefghijkl",
        "abc123456789",
        "trustno1trustno1",
        "correcthorsebatterystaple",
        "monkey123456",
    }
)
FREE_FAILURES = 5  # failed sign-ins before the back-off starts
BACKOFF_SECONDS = 30  # first lockout; doubles with every further failure
MAX_BACKOFF_SECONDS = 900  # at most 15 minutes
TOKEN_PREFIX = "wbt_"
DEFAULT_TOKEN_DAYS = 90  # a command-line token's life unless its owner asks for another
MAX_TOKEN_DAYS = 365
WEB_SESSION_PREFIX = "wbs_"
WEB_SESSION_HOURS = 12  # a browser stays signed in this long after signing in (a working day)


def _hasher():
    """The argon2 password hasher (imported lazily: it is only needed for sign-in)."""
    return PasswordHasher()


@functools.lru_cache(maxsize=1)
def _dummy_hash() -> str:
    """A hash of a random password: unknown users are verified against it, so failures take the same time."""
    return _hasher().hash(secrets.token_hex(16))


def check_password(password: str, user_id: str = "") -> None:
    """The password rule: at least 12 characters, not only whitespace, not a common password, not the user id."""
    if len(password) < MIN_PASSWORD:
        raise StudyError(f"a password needs at least {MIN_PASSWORD} characters")
    if not password.strip():
        raise StudyError("a password cannot be only spaces")
    if password.strip().lower() in COMMON_PASSWORDS or (user_id and password.strip().lower() == user_id.lower()):
        raise StudyError("that password is among the first ones an attacker tries; choose another")


def token_digest(token: str) -> str:
    """sha256 of a command-line token (tokens are 256 random bits: a fast hash is enough)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_expiry(created_at: str, expires_at: str) -> str:
    """When a token expires: its own expiry, or DEFAULT_TOKEN_DAYS after it was made (tokens older than expiry)."""
    if expires_at:
        return expires_at
    return (datetime.fromisoformat(created_at) + timedelta(days=DEFAULT_TOKEN_DAYS)).isoformat(timespec="seconds")


def _where(address: str | None, reason: str | None = None) -> dict:
    """An audit event's detail of a sign-in: where it came from (never what was typed as the password)."""
    return {"address": address or "command line", **({"reason": reason} if reason else {})}


def _seconds_from_now(stamp: str, now: datetime) -> float:
    """Seconds from now (the database's clock: q.db_time) until a UTC ISO timestamp (negative when past)."""
    return (datetime.fromisoformat(stamp) - now).total_seconds()


class TeamService(Service):
    """Users, sign-in, audit, governance, database migration."""

    def __init__(self, ctx: StudyContext, study: StudyService) -> None:
        super().__init__(ctx)
        self.study = study

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
        if password is not None:
            check_password(password, user_id)
        digest = _hasher().hash(password) if password else ""
        with self.session() as s:
            if q.get_user(s, user_id) is not None:
                raise StudyError(f"user {user_id!r} already exists")
            s.add(User(id=user_id, name=name, email=email, role=role, password_hash=digest, created_at=q.now()))
            q.add_audit(s, self.actor.user, "add", "user", user_id, None, {"role": role, "name": name, "email": email})

    def set_role(self, user_id: str, role: str) -> None:
        """Change a user's role (admins only); it applies to their very next action, signed in or not."""
        self.require("manage_users")
        if role not in ROLES:
            raise StudyError(f"role must be one of {', '.join(ROLES)}")
        with self.session() as s:
            user = q.get_user(s, user_id)
            if user is None:
                raise StudyError(f"no user {user_id!r}")
            old = user.role
            if old == role:
                return
            user.role = role
            s.add(user)
            q.add_audit(s, self.actor.user, "change", "user", user_id, {"role": old}, {"role": role})
            self._revoke(s, user_id, "role change")  # a token made for one role never acts with another

    def set_disabled(self, user_id: str, disabled: bool = True) -> None:
        """Disable (or enable again) an account (admins only): a disabled user can do nothing, tokens included."""
        self.require("manage_users")
        with self.session(write=True) as s:
            user = q.get_user(s, user_id)
            if user is None:
                raise StudyError(f"no user {user_id!r}")
            if disabled and user.role == "admin":
                admins = q.list_users(s)
                active = admins[(admins["role"] == "admin") & ~admins["disabled"].astype(bool)]
                if set(active["id"]) <= {user_id}:
                    raise StudyError(f"{user_id} is the last enabled admin; make another admin first")
            if bool(user.disabled) == disabled:
                return
            user.disabled = disabled
            s.add(user)
            q.add_audit(
                s,
                self.actor.user,
                "disable" if disabled else "enable",
                "user",
                user_id,
                {"disabled": not disabled},
                {"disabled": disabled},
            )
            if disabled:  # gone, not paused: enabling the account again does not revive an old token
                self._revoke(s, user_id, "disabled")

    def set_password(self, user_id: str, password: str, current: str | None = None) -> None:
        """Change a local password and end the account's other credentials (tokens).

        Your own password needs the current one (a stolen token must not be enough to take the
        account); an admin resets someone else's without it.
        """
        actor = self.current_actor()
        own = actor.account and actor.user == user_id
        if not own:
            self.require("manage_users")
        with self.session() as s:
            if q.get_user(s, user_id) is None:
                raise StudyError(f"no user {user_id!r}")
        if own:
            if current is None:
                raise PermissionDenied("changing your own password needs your current password")
            self.authenticate(user_id, current)  # same back-off and failure as a sign-in
        check_password(password, user_id)
        digest = _hasher().hash(password)
        with self.session(write=True) as s:
            user = q.get_user(s, user_id)
            if user is None:  # removed since the check above
                raise StudyError(f"no user {user_id!r}")
            user.password_hash = digest
            s.add(user)
            q.add_audit(s, actor.user, "change", "password", user_id, None, {"password": "changed"})
            self._revoke(s, user_id, "password change")

    def _revoke(self, s, user_id: str, why: str) -> int:
        """Every credential of a user ends (q.revoke_credentials), recorded with the reason."""
        n = q.revoke_credentials(s, user_id)
        if n:
            q.add_audit(
                s, self.current_actor().user, "revoke", "token", user_id, {"tokens": n}, {"tokens": 0, "why": why}
            )
        return n

    def users(self) -> pd.DataFrame:
        """Accounts (without password hashes)."""
        with self.session() as s:
            return q.list_users(s)

    def authenticate(self, user_id: str, password: str, address: str | None = None) -> Actor:
        """Check a local password; returns the Actor to act as.

        Every failure looks the same and takes the same time (unknown users are checked against a
        dummy hash); repeated failures for a user id lock it for a while, recorded in the database
        so the back-off holds across processes. Failures and lock-outs are audited with the address
        (the browser's, or "command line"), never the password.
        """
        self._refuse_if_locked(user_id, address)
        dummy = _dummy_hash()  # made on the first sign-in of a process, whoever signs in: no first-call tell
        with self.session() as s:
            user = q.get_user(s, user_id)
        stored = user.password_hash if user is not None and user.password_hash else dummy
        try:
            ok = _hasher().verify(stored, password or "") and user is not None and bool(user.password_hash)
        except (VerificationError, InvalidHashError):
            ok = False
        if not ok or user is None or user.disabled:  # (no user already makes ok False; named so Actor gets a User)
            self._record_failure(user_id, address)
            raise PermissionDenied("unknown user or wrong password")
        self._clear_failures(user_id)
        return Actor(user=user.id, role=user.role, name=user.name, email=user.email, account=True)

    def authenticate_token(self, user_id: str, token: str) -> Actor:
        """Check a command-line token of a user (made with `workbench user token`); same failures as passwords."""
        self._refuse_if_locked(user_id)
        digest = token_digest(token or "")
        with self.session() as s:
            user = q.get_user(s, user_id)
            stored = q.user_tokens(s, user_id) if user is not None else []
            now = q.db_time(s)
        match = next((row for row in stored if hmac.compare_digest(digest, row[0])), None)
        if match is None or user is None or user.disabled:
            self._record_failure(user_id, reason="wrong token")
            raise PermissionDenied("unknown user or wrong token")
        expires = token_expiry(match[1], match[2])
        if _seconds_from_now(expires, now) <= 0:
            self._record_failure(user_id, reason="expired token")
            raise PermissionDenied(
                f"this token of {user_id} expired on {expires[:10]}; sign in with your password "
                f"and make a new one (workbench user token {user_id})"
            )
        self._clear_failures(user_id)
        return Actor(user=user.id, role=user.role, name=user.name, email=user.email, account=True)

    def create_token(self, user_id: str, days: int = DEFAULT_TOKEN_DAYS) -> str:
        """A new command-line token for the acting user themself, valid for `days` (shown once; only its hash is stored)."""
        actor = self.current_actor()
        if actor.user != user_id or not actor.account:
            raise PermissionDenied(
                f"a token is made by its owner: sign in as {user_id} (WORKBENCH_USER={user_id}, "
                "then the password) to make one"
            )
        if not 1 <= int(days) <= MAX_TOKEN_DAYS:
            raise StudyError(f"a token lives 1 to {MAX_TOKEN_DAYS} days, not {days}")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        with self.session() as s:
            # from the database's clock: a client whose clock runs years ahead must not mint a token for years
            expires = (q.db_time(s) + timedelta(days=int(days))).isoformat(timespec="seconds")
            q.add_user_token(s, user_id, token_digest(token), expires)
            q.add_audit(s, actor.user, "add", "token", user_id, None, {"token": "issued", "expires_at": expires})
        return token

    def revoke_tokens(self, user_id: str) -> int:
        """Delete every token of a user (the user themself or an admin); returns how many."""
        actor = self.current_actor()
        if actor.user != user_id:
            self.require("manage_users")
        with self.session() as s:
            n = q.revoke_credentials(s, user_id)
            if n:
                q.add_audit(s, actor.user, "revoke", "token", user_id, {"tokens": n}, {"tokens": 0})
        return n

    # ------------------------------------------------------------ browser sessions (auth: local)

    def start_web_session(self, hours: float = WEB_SESSION_HOURS, address: str | None = None) -> str:
        """A new browser session for the signed-in account (a token for its cookie; only the hash is stored);
        audited as the sign-in, with the browser's address."""
        actor = self.current_actor()
        if not actor.account:
            raise PermissionDenied("only a signed-in account has a browser session")
        token = WEB_SESSION_PREFIX + secrets.token_urlsafe(32)
        with self.session() as s:
            expires = (q.db_time(s) + timedelta(hours=hours)).isoformat()  # the database's clock, as every expiry
            q.add_web_session(s, actor.user, token_digest(token), expires)
            q.add_audit(s, actor.user, "sign_in", "session", actor.user, None, _where(address))
        return token

    def resume_web_session(self, token: str) -> Actor:
        """The account of a browser session's token; refused when unknown, revoked, expired or disabled."""
        with self.session() as s:
            row = q.get_web_session(s, token_digest(token or ""))
            user = q.get_user(s, row.user_id) if row is not None else None
            now = q.db_time(s)
        if (
            row is None
            or row.revoked_at
            or _seconds_from_now(row.expires_at, now) <= 0
            or user is None
            or user.disabled
        ):
            raise PermissionDenied("your session has ended; sign in again")
        return Actor(
            user=user.id, role=user.role, name=user.name, email=user.email, account=True, session=row.token_hash
        )

    def end_web_session(self, token: str, address: str | None = None) -> None:
        """Sign-out: the browser session's token stops working at once (audited with the browser's address)."""
        with self.session() as s:
            row = q.get_web_session(s, token_digest(token or ""))
            live = row is not None and not row.revoked_at  # read before the revoke changes the row
            user_id = row.user_id if row is not None else None
            q.revoke_web_session(s, token_digest(token or ""))
            if live and user_id is not None:
                q.add_audit(s, user_id, "sign_out", "session", user_id, None, _where(address))

    def _refuse_if_locked(self, user_id: str, address: str | None = None) -> None:
        """A user id with too many recent failures waits (same answer for known and unknown ids); audited."""
        with self.session() as s:
            row = q.get_login_failure(s, user_id)
            now = q.db_time(s)
        if row is not None and row.locked_until and _seconds_from_now(row.locked_until, now) > 0:
            wait = int(_seconds_from_now(row.locked_until, now)) + 1
            with self.session(write=True) as s:
                q.add_audit(s, user_id, "sign_in_failed", "session", user_id, None, _where(address, "locked out"))
            raise PermissionDenied(f"too many failed sign-ins for {user_id}; try again in {wait} s")

    def _record_failure(self, user_id: str, address: str | None = None, reason: str = "wrong password") -> None:
        """Count a failed sign-in (audited); from the FREE_FAILURES-th on, lock the id for a doubling time."""
        with self.session(write=True) as s:
            row = q.record_login_failure(s, user_id)
            q.add_audit(s, user_id, "sign_in_failed", "session", user_id, None, _where(address, reason))
            over = row.failures - FREE_FAILURES
            if over >= 0:
                seconds = min(BACKOFF_SECONDS * 2 ** min(over, 10), MAX_BACKOFF_SECONDS)
                row.locked_until = (q.db_time(s) + timedelta(seconds=seconds)).isoformat()
                s.add(row)
                q.add_audit(
                    s, user_id, "lock_out", "session", user_id, None, {**_where(address), "until": row.locked_until}
                )

    def _clear_failures(self, user_id: str) -> None:
        """A successful sign-in resets the count."""
        with self.session(write=True) as s:  # read then delete: a deferred transaction could not wait its turn
            q.clear_login_failures(s, user_id)

    def actor_for(self, user_id: str) -> Actor:
        """The Actor of a known user (OIDC sign-in: the identity provider checked the password)."""
        with self.session() as s:
            user = q.get_user(s, user_id)
        if user is None:
            raise PermissionDenied(
                f"{user_id} has no account in this study; an admin adds it with `workbench user add`"
            )
        if user.disabled:
            raise PermissionDenied(f"the account {user_id} is disabled; ask an admin")
        return Actor(user=user.id, role=user.role, name=user.name, email=user.email, account=True)

    # ------------------------------------------------------------ audit

    def audit_log(self, entity: str | None = None, key: str | None = None, limit: int = 5000) -> pd.DataFrame:
        """The append-only audit trail, newest first."""
        self.require("see_unblinded")
        with self.session() as s:
            return q.list_audit(s, entity=entity, key=key, limit=limit)

    def verify_audit(self) -> q.AuditCheck:
        """Check the audit hash chain, then that every prompt version after the seed has its save event:
        the first problem found."""
        with self.session() as s:
            result = q.verify_audit(s)
            if not result.ok:
                return result
            saves = q.list_audit(s, entity="prompt", limit=10**9)
        audited = {json.loads(n).get("commit") for n in saves.loc[saves["action"] == "save", "new"] if n}
        missing = [(c, m) for c, m in prompt_repo.versions_after_seed(self.paths.prompts) if c not in audited]
        if missing:
            commit, subject = missing[0]
            result = result._replace(
                ok=False,
                reason=f"prompt version {commit[:8]} ({subject!r}) is in Git with no audit event"
                + (f", and {len(missing) - 1} more" if len(missing) > 1 else "")
                + ": it was committed outside the workbench, or its event was lost",
            )
        return result

    def check_bundle(self, path) -> list[dict]:
        """A bundle against this study: its hash, the annotated tag of its name, the freeze event, the audit chain.

        Each check is {check, ok, detail}. A bundle edited and re-hashed passes its own sha256 but
        not these: the tag and the audit trail recorded the hash it was frozen with.
        """
        content, recorded = bundle_mod.read_bundle_file(path)
        actual = bundle_mod.content_sha256(content)
        name = str(content.get("name", ""))
        checks = [{"check": "sha256", "ok": actual == recorded, "detail": f"content hashes to {actual}"}]
        tag = prompt_repo.tag_info(self.paths.prompts, name) if name else None
        if tag is None:
            checks.append({"check": "tag", "ok": False, "detail": f"the study has no tag {name!r}: not frozen here"})
        else:
            commit, message = tag
            tagged_sha = re.search(r"sha256 ([0-9a-f]{64})", message or "")
            ok = commit == content.get("prompt_commit") and (tagged_sha is None or tagged_sha.group(1) == actual)
            checks.append(
                {
                    "check": "tag",
                    "ok": ok,
                    "detail": (
                        f"tag {name} points at {commit[:8]}"
                        + (f" and records sha256 {tagged_sha.group(1)[:12]}" if tagged_sha else "")
                        + (
                            ""
                            if ok
                            else f"; the bundle says prompt {str(content.get('prompt_commit'))[:8]}, sha256 {actual[:12]}"
                        )
                    ),
                }
            )
        with self.session() as s:
            events = q.list_audit(s, entity="bundle", key=name)
        frozen = events[events["action"] == "freeze"]
        shas = [json.loads(n).get("sha256") for n in frozen["new"]] if len(frozen) else []
        checks.append(
            {
                "check": "audit",
                "ok": actual in shas,
                "detail": (
                    f"the freeze of {name} is recorded with this sha256"
                    if actual in shas
                    else f"the audit trail records {name} with sha256 {', '.join(x[:12] for x in shas if x) or '(no freeze event)'}, not {actual[:12]}"
                ),
            }
        )
        chain = self.verify_audit()
        checks.append(
            {
                "check": "audit chain",
                "ok": chain.ok,
                "detail": f"{chain.events} events intact" if chain.ok else chain.reason,
            }
        )
        return checks

    # ------------------------------------------------------------ governance

    def allow_endpoint(self, prefix: str) -> str:
        """Allow report text to be sent to an endpoint (admins only; recorded in the audit trail); the entry stored
        (127.0.0.1:8080 is stored as http://127.0.0.1:8080)."""
        self.require("settings")
        if not prefix.strip():
            raise StudyError("give the endpoint URL (or URL prefix) to allow")
        try:
            prefix = endpoints.allowed_entry(prefix)
        except ValueError as exc:
            raise StudyError(str(exc)) from exc
        if prefix not in self.config.allowed_endpoints:
            self.config.allowed_endpoints.append(prefix)
            self.study.save_config("allow", "endpoint", prefix)
        return prefix

    def disallow_endpoint(self, prefix: str) -> None:
        """Stop allowing an endpoint."""
        self.require("settings")
        if prefix in self.config.allowed_endpoints:
            self.config.allowed_endpoints.remove(prefix)
            self.study.save_config("disallow", "endpoint", prefix)

    # ------------------------------------------------------------ moving the database

    def migrate_database(self, to_url: str, switch: bool = True) -> pd.DataFrame:
        """Copy every table to another database (e.g. PostgreSQL); compare row counts and checksums.

        The target must be empty. The study switches to the new URL only when every table matches.
        """
        self.require("settings")
        if switch:  # the URL is written to workbench.yaml
            refuse_password_in_url(to_url, "--to")
        nul = find_nul_text(self.engine)
        if nul:  # before the target is touched: it stays empty for the next attempt
            raise StudyError(
                f"NUL character(s) in the study's text, which PostgreSQL cannot store: {'; '.join(nul)}; "
                "nothing was copied (the target is untouched). Remove the NUL in this study's database first (in "
                "SQLite: UPDATE report SET findings = replace(findings, char(0), '') WHERE id = '...'), then migrate again"
            )
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
                q.add_audit(
                    s,
                    self.actor.user,
                    "migrate",
                    "database",
                    "url",
                    {"url": _redact(self.url)},
                    {"url": _redact(to_url)},
                )
            self.config.database = to_url
            self.study.save_config()
        return report


def _redact(url: str) -> str:
    """A URL without its password."""
    return re.sub(r"://([^:/@]+):[^@]+@", r"://\1:***@", url)
