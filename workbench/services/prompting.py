"""Prompt revisions: drafts, saving as Git commits, history, diffs, revert, few-shot curation,
and the policy table across labels.

A draft is a user's label prompt being edited, stored with the version it started from; saving
commits every named draft as one version and is refused if another user changed the same label
meanwhile (nothing is lost: the draft stays for the user to re-apply).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import yaml

from workbench import importers
from workbench.core import policy, yaml_layout
from workbench.core.prompts import (
    TASK_FILE,
    LabelPrompt,
    PromptError,
    PromptSet,
    dump_label_prompt,
    dump_task,
    parse_label_prompt,
    prompt_set_from_dictionary,
)
from workbench.core.text import compose_text
from workbench.core.yaml_text import load_yaml
from workbench.errors import NotFound, StorageFault
from workbench.services import memo
from workbench.services.base import Service, StudyContext
from workbench.services.results import PromptDiff
from workbench.services.study import ConflictError, validate_prompt_files
from workbench.store import prompt_repo
from workbench.store import queries as q
from workbench.store.prompt_repo import PromptRepoError
from workbench.study import StudyError

TASK_LABEL = TASK_FILE.removesuffix(".yaml")  # how status, save and the audit name the shared task file

if TYPE_CHECKING:  # collaborators' types, for readers and type checkers only
    from workbench.services.splits import SplitsService
    from workbench.services.study import StudyService

DRAFT_REF = "draft"  # names a label's pending edit (draft or uncommitted file) wherever a version is asked


def _ref_name(ref_: str | None) -> str:
    """A version as a diff header shows it."""
    return "HEAD" if ref_ is None else (ref_ if ref_ == DRAFT_REF else ref_[:8])


def label_yaml(lp: LabelPrompt, onto: str | None = None) -> str:
    """A label prompt as the YAML text stored in the repo (stable key order).

    onto: the label's current file; its comments, order and layout are kept and only what changed is
    rewritten, so `git diff` and `prompts diff` show the change and nothing else.
    """
    if onto:
        with contextlib.suppress(Exception):  # a file ruamel cannot round-trip is written afresh, never half
            text = yaml_layout.rewrite(onto, dump_label_prompt(lp))
            if parse_label_yaml(text, f"{lp.label}.yaml") == lp:
                return text
    return yaml.safe_dump(dump_label_prompt(lp), sort_keys=False, allow_unicode=True, width=100)


def parse_label_yaml(text: str, source: str) -> LabelPrompt:
    """YAML text -> LabelPrompt, with errors naming the source."""
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        raise PromptError(f"{source}: not valid YAML ({exc})") from exc
    return parse_label_prompt(data, source)


def _provenance_line(row) -> str:
    """One line of a commit message naming the accepted proposal a label's new version came from."""
    notes = json.loads(row.note_ids_json or "[]")
    source = f"{'the ' if 'proposer' in row.source else ''}{row.source}"
    origin = (
        f", from error notes {', '.join('#' + str(n) for n in notes)}"
        if notes
        else ", from the disagreements (no notes)"
    )
    return f"{row.label}: proposal #{row.id} by {source}{origin}"


class PromptsService(Service):
    """The prompt set's versions (read and committed), editing, drafts and comparing prompts."""

    def __init__(self, ctx: StudyContext, study: StudyService, splits: SplitsService) -> None:
        super().__init__(ctx)
        self.study = study
        self.splits = splits

    # ------------------------------------------------------------ versions (read side)

    def prompt_files(self, ref_: str | None = None) -> dict[str, str]:
        """The prompt set's YAML texts at a version (not for readers: examples carry reference answers)."""
        self.require("see_unblinded")
        return prompt_repo.read_files(self.paths.prompts, ref_)

    @memo.per_commit
    @memo.per_request
    def prompt_set(self, ref_: str | None = None) -> PromptSet:
        """The parsed prompt set at a version (HEAD by default); a reader's copy lacks few-shot examples
        taken from reports they have not read yet (each carries its reference answer)."""
        ps = self.unblinded_prompt_set(ref_)
        scope = self.study.blind_scope()
        if scope is None or not (ps.example_report_ids() - scope):
            return ps
        for lp in list(ps.labels.values()):
            kept = tuple(ex for ex in lp.examples if not ex.source_report_id or ex.source_report_id in scope)
            if len(kept) != len(lp.examples):
                ps = ps.with_label(replace(lp, examples=kept))
        return ps

    def unblinded_prompt_set(self, ref_: str | None = None) -> PromptSet:
        """The parsed prompt set at a version with every example: for bookkeeping the user never sees."""
        return validate_prompt_files(prompt_repo.read_files(self.paths.prompts, ref_), self.vocab)

    def prompt_commit(self, ref_: str | None = None) -> str:
        """Full commit sha of a prompt version."""
        return prompt_repo.resolve(self.paths.prompts, ref_)

    # ------------------------------------------------------------ drafts

    def label_prompt(self, label: str, ref_: str | None = None) -> LabelPrompt:
        """One label's prompt at a version."""
        return self.prompt_set(ref_).label(self._asked(label))

    def asked_label(self, label: str) -> str:
        """A label id or name resolved to an asked label's id (a clear error otherwise)."""
        return self._asked(label)

    def _asked(self, label: str) -> str:
        """Resolve an asked label id (derived labels have no prompt)."""
        label_id = self.study.label_id(label)  # an unknown label: refused with the closest names
        if label_id not in self.vocab.asked_ids:
            raise StudyError(
                f"no prompt for label {label!r} (it is derived from the others); labels with prompts: "
                f"{', '.join(self.vocab.asked_ids)}"
            )
        return label_id

    def draft(self, label: str) -> tuple[LabelPrompt, str, bool]:
        """(prompt being edited, version it started from, whether a saved draft exists)."""
        label = self._asked(label)
        with self.session() as s:
            row = q.get_draft(s, label, self.actor.user)
        if row is not None:
            return parse_label_yaml(row.content, f"draft of {label}"), row.base_commit, True
        head = self.prompt_commit()
        return self.label_prompt(label, head), head, False

    def save_draft(self, lp: LabelPrompt, base_commit: str) -> None:
        """Keep an edited prompt as this user's draft (validated, not yet a version)."""
        self.require("edit_prompts")
        label = self._asked(lp.label)
        text = label_yaml(lp)
        parse_label_yaml(text, f"{label}.yaml")
        with self.session() as s:
            q.put_draft(s, label, self.actor.user, base_commit, text)

    def discard_draft(self, label: str) -> None:
        """Throw a draft away; a proposal accepted into it no longer speaks for the next saved version."""
        label = self._asked(label)
        with self.session() as s:
            q.delete_draft(s, label, self.actor.user)
            accepted = q.proposals_frame(s, label=label, status="accepted", author=self.actor.user)
            for pid in accepted["id"]:
                q.update_proposal(s, int(pid), status="discarded")

    def drafts(self) -> pd.DataFrame:
        """This user's open drafts."""
        with self.session() as s:
            return q.list_drafts(s, self.actor.user)

    # ------------------------------------------------------------ saving versions

    def save_prompts(self, prompts: list[LabelPrompt], message: str, base_commit: str | dict[str, str]) -> str:
        """Commit edited label prompts as one version; refused if any changed since its base.

        base_commit: the version the edit started from, or {label: version} per label.
        """
        self.require("edit_prompts")
        head = self.prompt_set()
        prompts = [lp for lp in prompts if head.labels.get(self._asked(lp.label)) != lp]
        if not prompts:
            raise StudyError("nothing to save: the prompts are the same as the current version")
        current = self.prompt_files(None)
        files = {f"{lp.label}.yaml": label_yaml(lp, onto=current.get(f"{lp.label}.yaml")) for lp in prompts}
        bases = {f"{lab}.yaml": b for lab, b in base_commit.items()} if isinstance(base_commit, dict) else base_commit
        current.update(files)

        validate_prompt_files(current, self.vocab)  # the whole set must still parse
        return self._commit_version(files, bases, message, [lp.label for lp in prompts])

    def commit_drafts(self, labels: list[str], message: str) -> str:
        """Save this user's drafts of the given labels as one version."""
        prompts, bases = [], {}
        for label in labels:
            lp, base, exists = self.draft(label)
            if not exists:
                raise StudyError(f"no draft for {label!r}")
            prompts.append(lp)
            bases[lp.label] = base  # each draft is checked against the version it started from
        return self.save_prompts(prompts, message, bases)

    # ------------------------------------------------------------ working-tree edits (editor, git, scripts)

    def working_edit(self, label: str) -> str | None:
        """The uncommitted text of a label's file in the study's prompt folder (None when it matches the latest version)."""
        name = f"{self._asked(label)}.yaml"
        changes = prompt_repo.working_changes(self.paths.prompts)
        return changes.get(name) if name in changes else None

    def _present(self, label: str, text: str | None, source: str) -> str:
        """A label's file text; StudyError saying how to restore the file when it was deleted (None)."""
        if text is None:
            raise StudyError(f"{source} was deleted; restore it (git -C {self.paths.prompts} checkout -- {label}.yaml)")
        return text

    def _validated_file_text(self, label: str, text: str | None, source: str) -> LabelPrompt:
        """Parse a label's text (a file or an editor buffer); the label inside must be the file's label."""
        lp = parse_label_yaml(self._present(label, text, source), source)
        if lp.label != label:
            raise PromptError(f"{source}: label is {lp.label!r} but the file is {label}.yaml")
        return lp

    def prompt_status(self) -> pd.DataFrame:
        """Per label with a draft or an uncommitted edit: what exists, whether it is valid, whether they clash."""
        drafts = self.drafts().set_index("label")
        changes = prompt_repo.working_changes(self.paths.prompts)
        labels = sorted(set(drafts.index) | {n[:-5] for n in changes if n != "_task.yaml"})
        rows = []
        for label in labels:
            name = f"{label}.yaml"
            draft = self.draft(label)[0] if label in drafts.index else None
            edit = "deleted" if name in changes and changes[name] is None else ("edited" if name in changes else "")
            problem = ""
            if name in changes:
                try:
                    lp = self._validated_file_text(label, changes[name], f"{self.paths.prompts.name}/{name}")
                    if draft is not None and lp != draft:
                        problem = "draft and file differ: keep one (prompts discard LABEL, or restore the file)"
                except (PromptError, StudyError) as exc:
                    problem = str(exc)
            rows.append(
                {
                    "label": label,
                    "draft": f"from {drafts.loc[label, 'base_commit'][:8]}" if draft is not None else "",
                    "file": edit,
                    "problem": problem,
                }
            )
        if TASK_FILE in changes:
            rows.append(
                {
                    "label": TASK_LABEL,
                    "draft": "",
                    "file": "edited" if changes[TASK_FILE] else "deleted",
                    "problem": self._task_problem(changes),
                }
            )
        return pd.DataFrame(rows, columns=["label", "draft", "file", "problem"])

    def _task_edit(self) -> str:
        """The uncommitted text of the shared task file, refused when it is unchanged or deleted."""
        changes = prompt_repo.working_changes(self.paths.prompts)
        if TASK_FILE not in changes:
            raise StudyError(f"nothing to save for {TASK_LABEL}: {TASK_FILE} matches the latest version")
        text = changes[TASK_FILE]
        if text is None:
            raise StudyError(
                f"{TASK_FILE} was deleted; every prompt needs it: restore it "
                f"(git -C {self.paths.prompts} checkout -- {TASK_FILE})"
            )
        return text

    def _task_problem(self, changes: dict[str, str | None]) -> str:
        """What is wrong with an uncommitted edit of the shared task file ('' when it can be saved)."""
        if changes.get(TASK_FILE) is None:
            return f"deleted: restore it (git -C {self.paths.prompts} checkout -- {TASK_FILE})"
        current = self.prompt_files(None)
        current.update({n: t for n, t in changes.items() if t is not None})
        try:
            validate_prompt_files(current, self.vocab)
        except (PromptError, StudyError) as exc:
            return str(exc)
        return ""

    def _refuse_clash(self, label: str) -> tuple[LabelPrompt | None, str | None, bool]:
        """(draft or None, uncommitted file text or None, file edited); refuses when both exist and differ."""
        lp, _, has_draft = self.draft(label)
        text = self.working_edit(label)
        edited = f"{label}.yaml" in prompt_repo.working_changes(self.paths.prompts)
        if has_draft and edited:
            file_lp = self._validated_file_text(label, text, f"{self.paths.prompts}/{label}.yaml")
            if file_lp != lp:
                raise StudyError(
                    f"{label}: your draft (see workbench prompts status) and the uncommitted edit of "
                    f"{self.paths.prompts / (label + '.yaml')} differ; keep one: `workbench prompts discard {label}` "
                    f"drops the draft, `git -C {self.paths.prompts} checkout -- {label}.yaml` drops the file edit. "
                    "Nothing was saved."
                )
        return (lp if has_draft else None), text, edited

    def pending_prompt(self, label: str) -> LabelPrompt:
        """What `prompts save` would commit for a label: its uncommitted file edit, else this user's draft."""
        label = self._asked(label)
        draft, text, edited = self._refuse_clash(label)
        if edited and text is not None:
            return self._validated_file_text(label, text, f"{self.paths.prompts.name}/{label}.yaml")
        if draft is None:
            raise NotFound(
                f"no draft of {label} and no uncommitted edit of {label}.yaml: `workbench prompts status` "
                f"lists them; start one with `workbench prompts edit {label}`"
            )
        return draft

    def pending_labels(self) -> list[str]:
        """Labels with a draft or an uncommitted file edit (what `prompts save` would commit)."""
        status = self.prompt_status()
        return [lab for lab in status["label"] if lab != "_task"]

    def editable_text(self, label: str) -> tuple[str, str]:
        """(text to edit, where it goes: 'file' when the folder has an uncommitted edit of the label, else 'draft')."""
        label = self._asked(label)
        draft, text, edited = self._refuse_clash(label)
        if edited and draft is None:
            if text is None:
                raise StudyError(f"{self.paths.prompts / (label + '.yaml')} was deleted; restore it first")
            return text, "file"
        return label_yaml(self.draft(label)[0]), "draft"

    def store_edited_text(self, label: str, text: str, target: str) -> LabelPrompt:
        """Validate an edited text and keep it: as the uncommitted file, or as this user's draft."""
        self.require("edit_prompts")
        label = self._asked(label)
        lp = self._validated_file_text(label, text, f"{label}.yaml")
        if target == "file":
            prompt_repo.check_regular_files(self.paths.prompts)  # never write through a link to a file elsewhere
            (self.paths.prompts / f"{label}.yaml").write_text(text, encoding="utf-8")
        else:
            _, base, _ = self.draft(label)
            self.save_draft(lp, base)
        return lp

    def set_prompt_field(
        self, label: str, field: str, value: str | None = None, add: tuple[str, ...] = (), remove: tuple[str, ...] = ()
    ) -> tuple[LabelPrompt, str]:
        """Change one field of a label's draft (or its uncommitted file): scalars set, list fields add/remove."""
        label = self._asked(label)
        text, target = self.editable_text(label)
        data = dump_label_prompt(self._validated_file_text(label, text, f"{label}.yaml"))
        lists = ("look_for", "do_not_label_when")
        keys = (
            [k for k in data if k not in ("label", "examples", "temporal", *lists)]
            + ["notes"]
            + [f"temporal.{k}" for k in data["temporal"]]
        )
        if field in lists:
            if value is not None or not (add or remove):
                raise StudyError(f"{field} is a list: use --add TEXT or --remove TEXT")
            missing = [item for item in remove if item not in data[field]]
            if missing:
                raise StudyError(f"{label}: {field} has no {missing[0]!r}; it has {data[field]}")
            data[field] = [x for x in data[field] if x not in remove] + [x for x in add if x not in data[field]]
        elif field in keys:
            if value is None or add or remove:
                raise StudyError(f"{field} takes one value: workbench prompts set {label} {field} VALUE")
            if field.startswith("temporal."):
                data["temporal"][field.split(".", 1)[1]] = value
            else:
                data[field] = value
        else:
            raise StudyError(
                f"no field {field!r}; fields: {', '.join(dict.fromkeys(keys + list(lists)))} "
                "(examples: workbench prompts add-example)"
            )
        try:
            new_text = yaml_layout.rewrite(text, data)  # the file's comments and layout kept
        except Exception:  # text PyYAML reads but ruamel cannot round-trip: written afresh
            new_text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
        return self.store_edited_text(label, new_text, target), target

    def save_labels(self, labels: list[str] | None, message: str) -> tuple[str, list[str]]:
        """Save drafts and uncommitted file edits of the given labels (default: all) as one version.

        A label with both a draft and a different file edit is refused with both named; a file
        edit is validated and committed as written (comments and layout kept).
        """
        self.require("edit_prompts")
        status = self.prompt_status()
        wanted = [x if x == TASK_LABEL else self._asked(x) for x in labels] if labels else list(status["label"])
        if not wanted:
            raise StudyError("nothing to save: no drafts and no uncommitted edits in the prompt folder")
        files, bases, saved = {}, {}, []
        head = self.prompt_commit()
        if TASK_LABEL in wanted:  # the shared task file (template, cue lists): saved like a label, audited as _task
            wanted.remove(TASK_LABEL)
            files[TASK_FILE], bases[TASK_FILE] = self._task_edit(), head
            saved.append(TASK_LABEL)
        for label in wanted:
            draft, text, edited = self._refuse_clash(label)
            if edited:
                source = f"{self.paths.prompts.name}/{label}.yaml"
                text = self._present(label, text, source)
                self._validated_file_text(label, text, source)
                files[f"{label}.yaml"], bases[f"{label}.yaml"] = text, head
            elif draft is not None:
                if draft == self.label_prompt(label, head):  # the draft changes nothing: keep the file as it is
                    continue
                files[f"{label}.yaml"] = label_yaml(draft, onto=self._file_text(label, head))
                bases[f"{label}.yaml"] = self.draft(label)[1]
            else:
                raise StudyError(f"nothing to save for {label}: no draft and no uncommitted edit of {label}.yaml")
            saved.append(label)
        if not files:
            raise StudyError(
                f"nothing to save: the draft(s) of {', '.join(wanted)} are the same as the current version"
            )
        current = self.prompt_files(None)
        current.update(files)

        validate_prompt_files(current, self.vocab)
        return self._commit_version(files, bases, message, saved), saved

    def _commit_version(self, files: dict[str, str], bases, message: str, labels: list[str]) -> str:
        """The one way a prompt version is committed (save, hand edits, accepted proposals, the app).

        A label whose draft holds an accepted proposal is named in the message with the proposal and its
        error notes, and the proposal is marked saved with the commit; drafts are dropped; each label is audited.
        """
        labels = [lab if lab == TASK_LABEL else self._asked(lab) for lab in labels]
        with self.session() as s:
            accepted = q.proposals_frame(s, status="accepted", author=self.actor.user)
            drafts = {lab: row.content for lab in labels if (row := q.get_draft(s, lab, self.actor.user)) is not None}
        # a proposal speaks for a version only when its draft is what is committed (not a revert or a hand edit);
        # compared as prompts: the committed file keeps its own layout
        from_draft = [
            lab for lab in labels if drafts.get(lab) is not None and self._same_prompt(files, lab, drafts[lab])
        ]
        accepted = accepted[accepted["label"].isin(from_draft)].drop_duplicates("label")
        lines = [_provenance_line(row) for row in accepted.itertuples(index=False)]
        full = message + ("\n\nProposed revisions:\n" + "\n".join(lines) if lines else "")
        try:
            commit = prompt_repo.commit_files(self.paths.prompts, files, full, self.actor.identity(), base=bases)
        except PromptRepoError as exc:
            raise_conflict(exc)
        try:
            with self.session() as s:
                for label in labels:
                    name = TASK_FILE if label == TASK_LABEL else f"{label}.yaml"
                    base = bases.get(name) if isinstance(bases, dict) else bases
                    q.delete_draft(s, label, self.actor.user)
                    q.add_audit(
                        s,
                        self.actor.user,
                        "save",
                        "prompt",
                        label,
                        {"base": base},
                        {"commit": commit, "message": message},
                    )
                for row in accepted.itertuples(index=False):
                    q.update_proposal(s, int(row.id), status="saved", commit=commit)
        except BaseException as exc:
            self._undo_unaudited(commit, exc)
            raise
        return commit

    @staticmethod
    def _same_prompt(files: dict[str, str], label: str, draft_text: str) -> bool:
        """Whether the file being committed for a label says what the draft says."""
        text = files.get(f"{label}.yaml")
        return text is not None and parse_label_yaml(text, label) == parse_label_yaml(draft_text, label)

    def _file_text(self, label: str, ref_: str | None) -> str | None:
        """A label's committed file at a version (None when absent)."""
        return prompt_repo.read_file(self.paths.prompts, f"{label}.yaml", ref_)

    def _undo_unaudited(self, commit: str, exc: BaseException) -> None:
        """A version and its audit event are kept together: when the event could not be written the commit is
        taken back (then the caller's "nothing was saved" is true); when even that fails, say so plainly."""
        try:
            undone = prompt_repo.undo_commit(self.paths.prompts, commit)
        except Exception:  # the disk that refused the event may refuse the undo too
            undone = False
        if not undone:
            raise StorageFault(
                f"prompt version {commit[:8]} was committed to Git but its audit event could not be written "
                f"({type(exc).__name__}); `workbench audit --verify` reports it. Undo it with "
                f"`git -C {self.paths.prompts} reset HEAD~1` once the disk has room, then save again"
            ) from exc

    def revert_label(self, label: str, to_ref: str, message: str | None = None) -> str:
        """Restore one label's prompt from an earlier version as a new commit."""
        self.require("edit_prompts")
        label = self._asked(label)
        old = prompt_repo.read_file(self.paths.prompts, f"{label}.yaml", to_ref)
        if old is None:
            raise StudyError(f"{label} has no prompt at version {to_ref!r}")
        lp = parse_label_yaml(old, f"{label}.yaml@{to_ref}")
        short = self.prompt_commit(to_ref)[:8]
        return self.save_prompts([lp], message or f"Revert {label} to {short}", self.prompt_commit())

    def import_prompt_dictionary(self, path: Path, message: str) -> str:
        """Import a {label: guidance} dictionary (JSON/YAML) as a new version of every label."""
        guidance = importers.read_prompt_dictionary(path)
        resolved = {}
        for key, text in guidance.items():
            label_id = self.vocab.resolve(key)
            if label_id is None:
                raise StudyError(f"{Path(path).name}: unknown label {key!r}")
            if label_id in self.vocab.asked_ids:
                resolved[label_id] = text
        ps = prompt_set_from_dictionary(resolved, self.vocab.asked_ids, self.prompt_set().task)
        return self.save_prompts(list(ps.labels.values()), message, self.prompt_commit())

    # ------------------------------------------------------------ history and diffs

    def prompt_history(self, label: str | None = None) -> pd.DataFrame:
        """Versions newest first (for one label or the whole set)."""
        name = f"{self._asked(label)}.yaml" if label else None
        versions = prompt_repo.history(self.paths.prompts, name)
        tags = {v: k for k, v in prompt_repo.tags(self.paths.prompts).items()}
        return pd.DataFrame(
            [
                {
                    "commit": v.commit,
                    "short": v.short,
                    "when": v.when,
                    "author": v.author,
                    "message": v.message,
                    "labels": ", ".join(f[:-5] for f in v.files if f.endswith(".yaml") and f != "_task.yaml"),
                    "frozen as": tags.get(v.commit, ""),
                }
                for v in versions
            ]
        )

    def prompt_diff(self, label: str, ref_a: str, ref_b: str | None = None) -> PromptDiff:
        """Difference of one label between two versions: unified text and fields."""
        self.require("see_unblinded")  # raw files: few-shot examples carry reference answers
        label = self._asked(label)
        name = f"{label}.yaml"
        a, b = self._version_text(label, ref_a), self._version_text(label, ref_b)
        unified = "".join(
            difflib.unified_diff(
                a.splitlines(True),
                b.splitlines(True),
                fromfile=f"{name}@{_ref_name(ref_a)}",
                tofile=f"{name}@{_ref_name(ref_b)}",
            )
        )
        lp_a = parse_label_yaml(a, name) if a else None
        lp_b = parse_label_yaml(b, name) if b else None
        return PromptDiff(label, unified, policy.diff_label_prompts(lp_a, lp_b))

    def _version_text(self, label: str, ref_: str | None) -> str:
        """A label's file at a version, or its pending edit for the ref `draft` ("" when absent)."""
        if ref_ == DRAFT_REF:
            return label_yaml(self.pending_prompt(label), onto=self._file_text(label, None))
        return prompt_repo.read_file(self.paths.prompts, f"{label}.yaml", ref_) or ""

    def diff_against_draft(self, label: str) -> PromptDiff:
        """What this user's draft changes relative to the version it started from."""
        lp, base, _ = self.draft(label)
        old = self.label_prompt(label, base)
        a = label_yaml(old, onto=self._file_text(label, base))
        b = label_yaml(lp, onto=a)
        unified = "".join(
            difflib.unified_diff(
                a.splitlines(True),
                b.splitlines(True),
                fromfile=f"{lp.label}.yaml@{base[:8]}",
                tofile=f"{lp.label}.yaml (draft)",
            )
        )
        return PromptDiff(lp.label, unified, policy.diff_label_prompts(old, lp))

    def previous_version(self, label: str) -> str | None:
        """The version before the latest change of a label (None when it never changed)."""
        versions = prompt_repo.history(self.paths.prompts, f"{self._asked(label)}.yaml", limit=2)
        return versions[1].commit if len(versions) > 1 else None

    # ------------------------------------------------------------ policy

    def policy_table(self, ref_: str | None = None) -> pd.DataFrame:
        """Every label's hedge and temporal policy side by side: of a committed version, or without one of the latest
        with this user's drafts and uncommitted edits in it (column `draft`: the label's row is its draft)."""
        drafted, pending = self._with_drafts(self.prompt_set(ref_), ref_)
        table = policy.policy_table(drafted, self.vocab.names())
        table["draft"] = table["label"].isin(pending)
        return table

    def policy_conflicts(self, ref_: str | None = None) -> list[policy.Finding]:
        """Inconsistencies between related labels and inside labels of a committed version; without a version,
        of the latest one with this user's drafts and uncommitted edits in it (their findings say "draft")."""
        committed = self.prompt_set(ref_)
        found = policy.policy_conflicts(committed, self.vocab.names(), self.vocab)
        drafted, pending = self._with_drafts(committed, ref_)
        if not pending:
            return found
        seen = set(found)
        return found + [
            dataclasses.replace(f, message=f"{f.message} (in your draft)")
            for f in policy.policy_conflicts(drafted, self.vocab.names(), self.vocab)
            if f not in seen
        ]

    def _with_drafts(self, ps: PromptSet, ref_: str | None) -> tuple[PromptSet, list[str]]:
        """The prompt set `ps` of version ref_ as it is, or (no version: `ps` is the latest) with this user's pending
        labels in it, and those labels."""
        pending = [] if ref_ is not None else self.pending_labels()
        for label in pending:
            ps = ps.with_label(self.pending_prompt(label))
        return ps, pending

    def new_contradictions(
        self, old: LabelPrompt | None, new: LabelPrompt, cues: dict | None = None
    ) -> list[policy.Finding]:
        """Contradictions inside a label's prompt that a revision (old -> new; None: a label new to the set) would
        create (cues: the task's)."""
        names = self.vocab.names()
        cues = cues if cues is not None else self.prompt_set().task.cue_lists()
        before = set(policy.label_contradictions(old, names[old.label], cues, self.vocab)) if old else set()
        return [f for f in policy.label_contradictions(new, names[new.label], cues, self.vocab) if f not in before]

    def contradictions_saved(self, before: str, after: str, labels: list[str]) -> list[policy.Finding]:
        """Contradictions inside the given labels' prompts that version `after` has and version `before` had not
        (what a save just committed; a hand save is the engineer's call, but it is said)."""
        old_ps, new_ps = self.prompt_set(before), self.prompt_set(after)
        cues = new_ps.task.cue_lists()
        return [
            f
            for label in labels
            if label in new_ps.labels
            for f in self.new_contradictions(old_ps.labels.get(label), new_ps.labels[label], cues)
        ]

    # ------------------------------------------------------------ few-shot curation

    def add_example_from_case(
        self,
        report_id: str,
        label: str,
        why: str = "",
        run_id: int | None = None,
        note_id: int | None = None,
        value: int | None = None,
    ) -> tuple[LabelPrompt, list[str]]:
        """Turn a disagreement into a few-shot example in this user's draft of the label.

        The example keeps the source report id (so evaluation leaves that report out) and the
        error note that motivated it; its value is the reference value unless given.
        Returns the updated draft and warnings (e.g. examples all of one class).
        """
        self.require("edit_prompts")
        label = self._asked(label)
        self.splits.require_tuning_report(report_id)  # validation and test reports are never taught to the labeller
        with self.session() as s:
            report = q.get_report(s, report_id)
            if report is None:
                raise StudyError(f"no report {report_id!r}")
            notes = q.notes_frame(s, label=label, report_id=report_id)
            evidence = ""
            if run_id is not None:
                hit = q.predictions_frame(s, run_id, report_id=report_id, label=label)
                evidence = hit["evidence"].iloc[0] if len(hit) else ""
        if value is None:
            item = self.study.item_reference(report_id, label)
            if item is None or item.value is None:
                raise StudyError(
                    f"{report_id}/{label} has no reference value yet (adjudicate it first) and no value was given"
                )
            value = item.value
        note_text = None
        if note_id is not None and len(notes):
            chosen = notes[notes["id"] == note_id]
            note_text = _note_summary(chosen.iloc[0]) if len(chosen) else None
        elif len(notes):
            note_text = _note_summary(notes.iloc[-1])

        text = compose_text(report.findings, report.impression, report.text, self.config.sections)
        # the model's evidence is a useful excerpt only when it was wrong to be positive
        example = policy.example_from_case(
            text, value, why or (note_text or ""), report_id, note_text, evidence if value == 0 else ""
        )
        lp, base, _ = self.draft(label)
        if any(ex.source_report_id == report_id for ex in lp.examples):
            raise StudyError(f"{report_id} is already an example of {label}")
        lp = lp.__class__(**{**lp.__dict__, "examples": lp.examples + (example,)})
        self.save_draft(lp, base)
        warnings = [f.message for f in policy.label_warnings(lp, self.vocab.names()[label])]
        return lp, warnings


def _note_summary(note: pd.Series) -> str:
    """A short line describing an error note."""
    text = f"{note['category']} ({note['significance']})"
    return f"{text}: {note['text']}" if note["text"] else text


def raise_conflict(exc: PromptRepoError):
    """Turn a repo refusal into the services' ConflictError when it is a concurrent edit."""
    if "changed since version" in str(exc):
        raise ConflictError(str(exc)) from exc
    raise StudyError(str(exc)) from exc


__all__ = ["PromptsService", "label_yaml", "parse_label_yaml", "dump_task"]
