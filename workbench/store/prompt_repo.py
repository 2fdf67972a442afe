"""The study's prompt versions in their own Git repository (GitPython), opened per operation.

Every revision is a commit with its author, so a team can read, compare and return to any
version. The repo is opened and closed per call because GitPython leaks file handles in a
long-running process (a Streamlit server is one). It writes its own user.name/user.email so it
works with no global Git identity (CI) and never touches the project's own repository.
"""

from __future__ import annotations

import fcntl
import os
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from workbench.errors import WorkbenchError


class _LazyGit:
    """GitPython, imported on first use: commands that never touch Git start ~0.1 s sooner."""

    def __getattr__(self, name: str):
        import git as gitpython

        globals()["git"] = gitpython
        return getattr(gitpython, name)


git = _LazyGit()

_LOCK = threading.Lock()  # one writer at a time inside a process (see write_lock for other processes)
DEFAULT_IDENTITY = ("workbench", "workbench@localhost")
STALE_LOCK_SECONDS = 120  # Git holds these locks for milliseconds; one this old was left by a killed write
GIT_LOCKS = ("config.lock", "index.lock", "HEAD.lock", "packed-refs.lock")


class PromptRepoError(WorkbenchError, ValueError):
    """A prompt-repo operation was refused (conflict, unknown version, frozen name taken)."""


@dataclass(frozen=True)
class Version:
    """One commit of the prompt repo."""

    commit: str
    short: str
    author: str
    email: str
    when: str
    message: str
    files: tuple[str, ...] = ()


@contextmanager
def write_lock(path: Path) -> Iterator[None]:
    """Serialise saves: a thread lock inside this process, an flock across processes (several app servers)."""
    with _LOCK, open(Path(path) / ".git" / "workbench-save.lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def clear_stale_locks(path: Path) -> list[str]:
    """Remove Git lock files left by a killed write (older than STALE_LOCK_SECONDS, and no workbench writer holds
    the repo: we hold its write lock); one line per lock removed. A younger lock may be a `git` run by hand: kept."""
    removed = []
    with write_lock(path):
        for name in GIT_LOCKS:
            lock = Path(path) / ".git" / name
            try:
                age = time.time() - lock.stat().st_mtime
            except FileNotFoundError:
                continue
            if age > STALE_LOCK_SECONDS:
                lock.unlink(missing_ok=True)
                removed.append(
                    f"removed a stale Git lock {lock} ({age / 60:.0f} min old, left by a write that was killed; "
                    "no workbench process was writing the prompt repo)"
                )
    return removed


@contextmanager
def open_repo(path: Path) -> Iterator[git.Repo]:
    """Open the prompt repo for one operation and always close it."""
    if not (Path(path) / ".git").exists():
        raise PromptRepoError(f"{path} is not a prompt repository (no .git)")
    repo = git.Repo(path)
    try:
        yield repo
    finally:
        repo.close()


SYMLINK_MODE = 0o120000  # a Git tree entry that is a symbolic link


def check_regular_files(path: Path) -> None:
    """Refuse a prompt folder holding anything but regular files and folders (outside .git), naming each.

    A symbolic link would be validated through what it points to and committed as a link (mode
    120000): every later read of that version gets the link's target path, not a prompt.
    """
    path = Path(path)
    bad = []
    for root, dirs, files in os.walk(path, followlinks=False):
        here = Path(root)
        if here == path and ".git" in dirs:
            dirs.remove(".git")
        for name in sorted(dirs + files):
            entry = here / name
            kind = _odd_kind(entry)
            if kind:
                bad.append(f"{entry.relative_to(path).as_posix()} is {kind}")
    if bad:
        raise PromptRepoError(
            f"the prompt folder {path} holds only regular files: {'; '.join(bad)}. Replace each link with a copy of "
            "its file (cp --remove-destination TARGET FILE) or remove it, then save again. Nothing was saved."
        )


def _odd_kind(entry: Path) -> str | None:
    """'a symbolic link (to X)', 'a named pipe' ... for what a prompt folder must not hold; None for a file or folder."""
    st = entry.lstat()
    if stat.S_ISLNK(st.st_mode):
        return f"a symbolic link (to {os.readlink(entry)})"
    if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
        return None
    return "not a regular file (a pipe, socket or device)"


def _blob_of(item, where: str):
    """A tree entry that is a regular file, or PromptRepoError naming a committed link."""
    if item.mode == SYMLINK_MODE:
        raise PromptRepoError(
            f"{item.path} is a symbolic link in prompt version {where}; the workbench reads only "
            "regular files: save the file itself as a new version (it refuses links now)"
        )
    return item


def init_repo(path: Path, files: dict[str, str], message: str, author: tuple[str, str] = DEFAULT_IDENTITY) -> str:
    """Create the repo, write the seed files, commit them; returns the commit sha."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    repo = git.Repo.init(path, initial_branch="main")
    try:
        with repo.config_writer() as cw:
            cw.set_value("user", "name", DEFAULT_IDENTITY[0])
            cw.set_value("user", "email", DEFAULT_IDENTITY[1])
            cw.set_value("commit", "gpgsign", "false")
    finally:
        repo.close()
    return commit_files(path, files, message, author, base=None)


def _actor(author: tuple[str, str]) -> git.Actor:
    """A Git actor from (name, email)."""
    return git.Actor(author[0] or DEFAULT_IDENTITY[0], author[1] or DEFAULT_IDENTITY[1])


def resolve(path: Path, ref: str | None = None) -> str:
    """Full commit sha of a ref (branch, tag, short sha); HEAD when ref is None."""
    with open_repo(path) as repo:
        try:
            return repo.commit(ref or "HEAD").hexsha
        except (git.BadName, ValueError, git.GitCommandError) as exc:
            raise PromptRepoError(f"unknown prompt version {ref!r}") from exc


def read_files(path: Path, ref: str | None = None) -> dict[str, str]:
    """Every YAML file's text at a version."""
    with open_repo(path) as repo:
        try:
            commit = repo.commit(ref or "HEAD")
        except (git.BadName, ValueError, git.GitCommandError) as exc:
            raise PromptRepoError(f"unknown prompt version {ref!r}") from exc
        return {
            blob.path: _blob_of(blob, commit.hexsha[:8]).data_stream.read().decode("utf-8")
            for blob in commit.tree.traverse()
            if blob.type == "blob" and blob.path.endswith(".yaml")
        }


def read_file(path: Path, name: str, ref: str | None = None) -> str | None:
    """One file's text at a version (None when it does not exist there)."""
    with open_repo(path) as repo:
        try:
            tree = repo.commit(ref or "HEAD").tree
        except (git.BadName, ValueError, git.GitCommandError) as exc:
            raise PromptRepoError(f"unknown prompt version {ref!r}") from exc
        try:
            item = tree / name
        except KeyError:
            return None
        return _blob_of(item, str(ref or "HEAD")).data_stream.read().decode("utf-8")


def commit_files(
    path: Path,
    files: dict[str, str],
    message: str,
    author: tuple[str, str],
    base: str | dict[str, str] | None,
    remove: list[str] | tuple[str, ...] = (),
) -> str:
    """Write files and commit them as one version; refuse when a file changed since its base.

    `base` is the version the editor started from (one for all files, or one per file); if a
    file being saved differs between its base and HEAD, someone else saved it meanwhile: refuse
    rather than overwrite their work. `remove` names files that leave this version (a vocabulary's
    dropped labels); the versions before it keep them.
    """
    path = Path(path)
    if not message.strip():
        raise PromptRepoError("a prompt revision needs a message saying what changed and why")
    with write_lock(path), open_repo(path) as repo:
        check_regular_files(path)  # under the lock: what is validated is what is committed
        if base is not None and repo.head.is_valid():
            bases = base if isinstance(base, dict) else {name: base for name in files}
            for one_base in sorted(set(bases.values())):
                _check_no_conflict(repo, {n: files[n] for n, b in bases.items() if b == one_base}, one_base)
        _check_working_tree(path, repo, files)
        changed = []
        head = repo.head.commit.tree if repo.head.is_valid() else None
        for name, content in sorted(files.items()):
            target = path / name
            old = target.read_text(encoding="utf-8") if target.exists() else None
            if old != content:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content, encoding="utf-8")
            if _blob_text(head, name) != content:  # a committed working-tree edit is a change too
                changed.append(name)
        gone = [name for name in remove if _blob_text(head, name) is not None]  # older versions keep them
        if not changed and not gone and repo.head.is_valid():
            raise PromptRepoError("nothing to save: the files are the same as the current version")
        if gone:
            repo.index.remove(gone, working_tree=True)
        repo.index.add(sorted(files))
        commit = repo.index.commit(message.strip(), author=_actor(author), committer=_actor(author))
        return commit.hexsha


def undo_commit(path: Path, commit: str) -> bool:
    """Take back the latest commit when it is `commit` (its audit event could not be written): the branch and
    the index go back to its parent, the files stay in the folder as uncommitted edits. False when not undone."""
    with write_lock(path), open_repo(path) as repo:
        head = repo.head.commit
        if head.hexsha != commit or not head.parents:
            return False
        repo.head.reset(head.parents[0], index=True, working_tree=False)
        return repo.head.commit.hexsha == head.parents[0].hexsha


def versions_after_seed(path: Path) -> list[tuple[str, str]]:
    """(commit, first line of its message) of every version after the seed, oldest first."""
    with open_repo(path) as repo:
        if not repo.head.is_valid():
            return []
        commits = [c for c in repo.iter_commits("HEAD") if c.parents]
        return [(c.hexsha, c.message.strip().splitlines()[0] if c.message.strip() else "") for c in reversed(commits)]


def working_changes(path: Path) -> dict[str, str | None]:
    """YAML files whose text in the folder differs from the latest version: name -> text (None = deleted).

    These are a user's edits made with their editor or git, not yet committed; a save must
    commit them or refuse, never overwrite them.
    """
    path = Path(path)
    check_regular_files(path)
    committed = read_files(path, None) if _has_head(path) else {}
    on_disk = {
        f.relative_to(path).as_posix(): f for f in path.rglob("*.yaml") if ".git" not in f.relative_to(path).parts
    }
    out: dict[str, str | None] = {}
    for name in sorted(set(committed) | set(on_disk)):
        text = on_disk[name].read_text(encoding="utf-8", errors="replace") if name in on_disk else None
        if text != committed.get(name):
            out[name] = text
    return out


def _has_head(path: Path) -> bool:
    """Whether the repo has a first commit."""
    with open_repo(path) as repo:
        return repo.head.is_valid()


def _blob_text(tree, name: str) -> str | None:
    """A file's text in a commit tree (None when absent or no tree)."""
    if tree is None:
        return None
    try:
        return (tree / name).data_stream.read().decode("utf-8")
    except KeyError:
        return None


def _check_working_tree(path: Path, repo: git.Repo, files: dict[str, str]) -> None:
    """Refuse to overwrite an uncommitted edit of a file being saved with different content."""
    head = repo.head.commit.tree if repo.head.is_valid() else None
    clash = []
    for name, content in sorted(files.items()):
        target = Path(path) / name
        if not target.exists():
            continue
        committed = _blob_text(head, name)
        text = target.read_text(encoding="utf-8", errors="replace")
        if text != committed and text != content:
            clash.append(name)
    if clash:
        raise PromptRepoError(
            f"{', '.join(clash)} in {path} has uncommitted edits that differ from what is being saved; "
            "save those edits first (workbench prompts save LABEL -m MESSAGE) or restore the file "
            f"(git -C {path} checkout -- FILE). Nothing was saved."
        )


def _check_no_conflict(repo: git.Repo, files: dict[str, str], base: str) -> None:
    """Raise naming every file changed by someone else since base."""
    try:
        base_commit = repo.commit(base)
        base_commit.tree  # noqa: B018  (loads the object: an unknown full sha fails here)
    except (git.BadName, ValueError, git.GitCommandError) as exc:
        raise PromptRepoError(f"unknown base version {base!r}") from exc
    head = repo.head.commit
    if head.hexsha == base_commit.hexsha:
        return
    diffs = base_commit.diff(head)
    changed = {d.a_path for d in diffs} | {d.b_path for d in diffs}
    clash = sorted(set(files) & changed)
    if clash:
        culprit = next(repo.iter_commits(f"{base_commit.hexsha}..{head.hexsha}", paths=clash, max_count=1), head)
        raise PromptRepoError(
            f"{', '.join(clash)} changed since version {base[:8]} (by {culprit.author.name} in {culprit.hexsha[:8]}: "
            f"{culprit.message.strip()[:80]!r}); reload the latest version, re-apply your edit and save again. "
            "Nothing was saved."
        )


def history(path: Path, name: str | None = None, limit: int = 200) -> list[Version]:
    """Commits newest first, optionally only those touching one file."""
    with open_repo(path) as repo:
        if not repo.head.is_valid():
            return []
        kwargs = {"paths": name} if name else {}
        out = []
        for c in repo.iter_commits("HEAD", max_count=limit, **kwargs):
            out.append(
                Version(
                    commit=c.hexsha,
                    short=c.hexsha[:8],
                    author=c.author.name,
                    email=c.author.email,
                    when=c.authored_datetime.isoformat(timespec="seconds"),
                    message=c.message.strip(),
                    files=tuple(sorted(c.stats.files)),
                )
            )
        return out


def ordinal(path: Path, commit: str) -> int:
    """Position of a commit in first-parent history (1 = the seed), for ordering runs by version."""
    with open_repo(path) as repo:
        try:
            return int(repo.git.rev_list("--count", "--first-parent", commit))
        except git.GitCommandError:
            return 0


def create_tag(path: Path, name: str, ref: str, message: str, author: tuple[str, str]) -> str:
    """An annotated tag; refuses to move or reuse a name."""
    with write_lock(path), open_repo(path) as repo:
        if name in [t.name for t in repo.tags]:
            raise PromptRepoError(
                f"the name {name!r} is already frozen (tag exists at {repo.tags[name].commit.hexsha[:8]}); choose a new name"
            )
        try:
            commit = repo.commit(ref)
        except (git.BadName, ValueError) as exc:
            raise PromptRepoError(f"unknown prompt version {ref!r}") from exc
        with repo.config_writer() as cw:  # annotated tags need a tagger identity in the repo config
            cw.set_value("user", "name", author[0] or DEFAULT_IDENTITY[0])
            cw.set_value("user", "email", author[1] or DEFAULT_IDENTITY[1])
        repo.create_tag(name, ref=commit, message=message)
        return commit.hexsha


def git_errors() -> tuple[type[BaseException], ...]:
    """What Git itself raises (a refused write, a full disk), for callers that undo their work on it."""
    return (git.GitError,)


def delete_tag(path: Path, name: str) -> None:
    """Remove a tag (only to undo a freeze whose bundle could not be written)."""
    with write_lock(path), open_repo(path) as repo:
        if name in [t.name for t in repo.tags]:
            repo.delete_tag(repo.tags[name])


def tag_info(path: Path, name: str) -> tuple[str, str] | None:
    """(commit sha, annotated tag message) of a tag, None when there is no such tag."""
    with open_repo(path) as repo:
        tag = next((t for t in repo.tags if t.name == name), None)
        if tag is None:
            return None
        return tag.commit.hexsha, (tag.tag.message if tag.tag is not None else "")


def tags(path: Path) -> dict[str, str]:
    """Tag name -> commit sha."""
    with open_repo(path) as repo:
        return {t.name: t.commit.hexsha for t in repo.tags}
