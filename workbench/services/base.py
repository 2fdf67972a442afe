"""What every service of an opened study shares: the study context, and the small base that reads it.

A `StudyContext` is one study opened by one actor: its folder and paths, settings, vocabulary,
database engine, and the actor check. Services are plain objects built on one context with the
other services they use passed in (services/__init__.py composes them); nothing is inherited from
another service, so what a method calls is written where it is called.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from workbench.core import adaptive as adaptive_core
from workbench.core import reference as ref
from workbench.core.vocab import Vocabulary
from workbench.store import db
from workbench.store import queries as q
from workbench.study import (
    StudyConfig,
    StudyPaths,
    database_url,
    find_vocabulary_file,
    load_config,
    load_vocabulary_file,
)


def _live(web, user_id: str, now) -> bool:
    """A browser session of this user that is neither revoked nor expired at `now` (the database's clock)."""
    from datetime import datetime

    if web is None or web.revoked_at or web.user_id != user_id:
        return False
    return datetime.fromisoformat(web.expires_at) > now


class StudyContext:
    """One study opened for one actor: paths, settings, vocabulary, database engine and the actor check."""

    def __init__(self, root: Path, actor, engine=None):
        self.root = Path(root).resolve()
        self.paths = StudyPaths(self.root)
        self.config: StudyConfig = load_config(self.root)
        vocab_file = self.root / self.config.vocabulary
        self.vocab: Vocabulary = load_vocabulary_file(
            vocab_file if vocab_file.exists() else find_vocabulary_file(self.config.vocabulary)
        )
        self.url = database_url(self.root, self.config)
        self.engine = engine or db.make_engine(self.url)
        self.actor = actor
        self.request_memo = None  # the app's per-rerun memo of pure reads (services/memo.py per_request)
        self.ui_revision = None  # the app's write counter shared by every session on the study (ui/state.py)

    def session(self, write: bool = False):
        """One transaction (commit on success, roll back on error); write=True for read-then-write.

        For a signed-in account every transaction first checks the account is still enabled, so a
        disabled user can do nothing at all, whatever method they call.
        """
        if not self.actor.account:
            return db.session_scope(self.engine, write=write)
        return self._account_session(write)

    @contextmanager
    def _account_session(self, write: bool):
        """A transaction that refuses a disabled (or deleted) account before anything is read."""
        from workbench.services.study import PermissionDenied

        # the check is its own short read: in the caller's transaction it would be a read before the caller's
        # write, and SQLite refuses at once (no busy wait) a write after a read that another writer has overtaken
        with db.session_scope(self.engine) as s:
            user = q.get_user(s, self.actor.user)
        if user is None or user.disabled:
            raise PermissionDenied(f"the account {self.actor.user} is disabled; ask an admin")
        with db.session_scope(self.engine, write=write) as s:
            yield s

    def current_actor(self):
        """The actor as the database knows them now: a changed role applies at once, a disabled account can do nothing."""
        from workbench.services.study import Actor, PermissionDenied

        if not self.actor.account:
            return self.actor  # the local operator (auth none) or a script's own Actor
        with db.session_scope(self.engine) as s:
            user = q.get_user(s, self.actor.user)
            web = q.get_web_session(s, self.actor.session) if self.actor.session else None
            now = q.db_time(s) if web is not None else None
        if user is None or user.disabled:
            raise PermissionDenied(f"the account {self.actor.user} is disabled; ask an admin")
        if self.actor.session and not _live(web, user.id, now):
            raise PermissionDenied("your session has ended (signed out here or in another tab); sign in again")
        return Actor(
            user=user.id, role=user.role, name=user.name, email=user.email, account=True, session=self.actor.session
        )

    def require(self, permission: str) -> None:
        """Raise PermissionDenied unless the actor's current role allows the action."""
        from workbench.services.study import PERMISSIONS, PermissionDenied

        allowed = PERMISSIONS[permission]
        actor = self.current_actor()
        if actor.role not in allowed:
            raise PermissionDenied(
                f"{actor.user} ({actor.role}) may not {permission.replace('_', ' ')}; "
                f"this needs one of: {', '.join(sorted(allowed))}"
            )

    def rule(self) -> ref.ReferenceRule:
        """The study's reference rule."""
        return ref.ReferenceRule.from_config(self.config.reference)

    def adaptive_settings(self) -> adaptive_core.AdaptiveSettings:
        """The study's adaptive-reading settings (off unless set)."""
        return adaptive_core.AdaptiveSettings.from_config(self.config.adaptive)


class Service:
    """A service on one study context; its collaborators are the other services its constructor takes."""

    def __init__(self, ctx: StudyContext) -> None:
        self.ctx = ctx

    # the context's parts, read where a method needs them (settings can change while a study is open)
    @property
    def root(self) -> Path:
        return self.ctx.root

    @property
    def paths(self) -> StudyPaths:
        return self.ctx.paths

    @property
    def config(self) -> StudyConfig:
        return self.ctx.config

    @property
    def vocab(self) -> Vocabulary:
        return self.ctx.vocab

    @property
    def url(self) -> str:
        return self.ctx.url

    @property
    def engine(self):
        return self.ctx.engine

    @property
    def actor(self):
        return self.ctx.actor

    def session(self, write: bool = False):
        """One transaction on the study database (StudyContext.session)."""
        return self.ctx.session(write)

    def current_actor(self):
        """The actor as the database knows them now (StudyContext.current_actor)."""
        return self.ctx.current_actor()

    def require(self, permission: str) -> None:
        """Refuse the action unless the actor's current role allows it (StudyContext.require)."""
        self.ctx.require(permission)

    def rule(self) -> ref.ReferenceRule:
        """The study's reference rule."""
        return self.ctx.rule()

    def adaptive_settings(self) -> adaptive_core.AdaptiveSettings:
        """The study's adaptive-reading settings (off unless set)."""
        return self.ctx.adaptive_settings()
