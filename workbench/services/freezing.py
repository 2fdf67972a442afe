"""Freezing a prompt version into a bundle, and scoring generated reports with the study's cache."""

from __future__ import annotations

import errno
import json
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import yaml

from workbench import bundle as bundle_mod
from workbench import scoring
from workbench.core.metrics import finite
from workbench.core.parsing import PARSER_VERSION
from workbench.errors import StorageFault, WorkbenchError
from workbench.labeller import batch
from workbench.services.base import Service, StudyContext
from workbench.services.results import FrozenBundle, json_default
from workbench.services.runs import StudyBatchJournal, model_endpoints
from workbench.store import db, prompt_repo
from workbench.store import queries as q
from workbench.store.prompt_repo import PromptRepoError
from workbench.study import StudyError

if TYPE_CHECKING:  # collaborators' types, for readers and type checkers only
    from workbench.services.evaluation import Evaluation, EvaluationService
    from workbench.services.prompting import PromptsService
    from workbench.services.runs import RunsService
    from workbench.services.splits import SplitsService
    from workbench.services.study import StudyService


class StudyExtractionCache:
    """Extraction cache in the study database (shared by every scoring job of the study)."""

    def __init__(self, wb) -> None:
        self.wb = wb

    def get_many(self, keys: list[str]) -> dict[str, str]:
        """Cached labels for keys."""
        with self.wb.session() as s:
            return q.get_extractions(s, keys)

    def put(self, key: str, bundle_sha: str, text_hash: str, labels_json: str) -> None:
        """Store labels."""
        with self.wb.session() as s:
            q.put_extraction(s, key, bundle_sha, text_hash, labels_json)


class FreezeService(Service):
    """Bundles and scoring."""

    def __init__(
        self,
        ctx: StudyContext,
        study: StudyService,
        splits: SplitsService,
        runs: RunsService,
        evaluation: EvaluationService,
        prompts: PromptsService,
    ) -> None:
        super().__init__(ctx)
        self.study = study
        self.splits = splits
        self.runs = runs
        self.evaluation = evaluation
        self.prompts = prompts

    def justifying_run(self, prompt_commit: str, cohort: str | None = None):
        """The latest finished run of this prompt version on the development cohort."""
        cohort = cohort or self.default_cohort()
        runs = self.runs.runs(cohort)
        runs = runs[(runs["prompt_commit"] == prompt_commit) & (runs["status"] == "finished")]
        if runs.empty:
            raise StudyError(
                f"no finished run of prompt version {prompt_commit[:8]} on cohort {cohort!r}: run it first "
                f"(workbench run --cohort {cohort} --prompt {prompt_commit[:8]}) so the bundle carries the metrics that justify it"
            )
        asked = list(self.vocab.asked_ids)
        for row in runs.itertuples(index=False):  # newest first: the latest run that covers every asked label
            if not set(asked) - set(json.loads(row.labels_json)):
                return self.runs.run_info(int(row.id))
        latest = int(runs.iloc[0]["id"])
        missing = [lab for lab in asked if lab not in set(json.loads(runs.iloc[0]["labels_json"]))]
        raise StudyError(
            f"run {latest} of prompt version {prompt_commit[:8]} on cohort {cohort!r} does not cover every asked label: "
            f"{len(missing)} of {len(asked)} missing ({', '.join(missing)}); a bundle is justified by a run of all its labels: "
            f"run `workbench run --cohort {cohort} --prompt {prompt_commit[:8]}` (cached answers are reused) and freeze again"
        )

    def default_cohort(self) -> str:
        """The study's development cohort when it exists, else the only cohort; else an error naming the choices."""
        names = self.study.cohorts()["name"].tolist()
        if self.config.dev_cohort in names:
            return self.config.dev_cohort
        if len(names) == 1:
            return names[0]
        raise StudyError(
            f"no development cohort {self.config.dev_cohort!r} (dev_cohort in workbench.yaml); "
            f"choose one with --cohort: {', '.join(names) or '(none yet: import reports first)'}"
        )

    def freeze(
        self,
        name: str,
        prompt_ref: str | None = None,
        cohort: str | None = None,
        frozen_at: str | None = None,
        ci: str = "wilson",
    ) -> FrozenBundle:
        """Tag a prompt version and write its bundle (canonical JSON + YAML) with a sha256: all or nothing.

        Steps: tag, bundle files, audit event. The audit event's commit is the point of no return; any
        failure before it (a full disk, a refused write, a kill) leaves no tag, no file and no event, and
        a freeze killed outright is undone by the next freeze of its name (see _undo_incomplete_freeze).
        """
        self.require("freeze")
        try:
            bundle_mod.check_name(name)  # Git's tag-name rules too, before anything is written
        except bundle_mod.BundleError as exc:
            raise StudyError(str(exc)) from exc
        notes = prompt_repo.clear_stale_locks(self.paths.prompts)
        self._undo_incomplete_freeze(name)
        if name in prompt_repo.tags(self.paths.prompts) or (self.paths.bundles / f"{name}.json").exists():
            raise StudyError(f"the name {name!r} is already frozen; frozen names cannot be moved or reused")
        commit = self.prompts.prompt_commit(prompt_ref)
        run = self.justifying_run(commit, cohort)
        content = self.bundle_content(name, commit, run, frozen_at or q.now(), ci)
        bundle_mod.bundle_bytes(content)  # fails early (before the tag) if the content cannot be serialised
        sha = bundle_mod.content_sha256(content)
        try:
            prompt_repo.create_tag(
                self.paths.prompts, name, commit, _freeze_message(name, self.actor.user, sha), self.actor.identity()
            )
            json_path, yaml_path, sha = bundle_mod.write_bundle(self.paths.bundles, content)
            with self.session() as s:
                q.add_audit(
                    s, self.actor.user, "freeze", "bundle", name, None, {"sha256": sha, "commit": commit, "run": run.id}
                )
        except BaseException as exc:
            left = self._remove_freeze(name, sha)
            if not isinstance(exc, _freeze_faults()):
                raise  # a kill (KeyboardInterrupt ...) or a bug: undone, then passed on
            fault = StudyError if isinstance(exc, WorkbenchError) else StorageFault  # a refusal, or the disk's fault
            raise fault(
                f"freeze of {name!r} failed: {_one_line(exc, self.root)}; {left or 'nothing was kept (no tag, no bundle, no audit event)'}; "
                "the name is still free: fix the cause and freeze again"
            ) from exc
        notes += _report_text_note(content)
        return FrozenBundle(name, sha, json_path, yaml_path, commit, run.id, tuple(notes))

    __call__ = freeze  # wb.freeze(name) freezes, as it did before the service took the name

    def _undo_incomplete_freeze(self, name: str) -> None:
        """A tag this workbench made for `name` with no freeze event recorded is a freeze that was killed
        before its end: remove it and the bundle files it made (they carry the tag's sha256), nothing else."""
        tag = prompt_repo.tag_info(self.paths.prompts, name)
        if tag is None:
            return
        found = re.fullmatch(
            rf"Frozen bundle {re.escape(name)} by .*\n\nsha256 ([0-9a-f]{{64}})\s*", tag[1] or "", re.S
        )
        if found is None:
            return  # a tag made by hand or by an older version: the name stays taken
        with self.session() as s:
            events = q.list_audit(s, entity="bundle", key=name)
        if (events["action"] == "freeze").any():
            return
        left = self._remove_freeze(name, found.group(1))
        if left:
            raise StudyError(f"an interrupted freeze of {name!r} left files that could not be removed: {left}")

    def _remove_freeze(self, name: str, sha: str) -> str:
        """Remove what a freeze of `name` with content `sha` wrote (files, then the tag), never another freeze's;
        '' when all is gone, else what is left and how to remove it by hand."""
        left = []
        folder = self.paths.bundles
        json_path = folder / f"{name}.json"
        try:
            ours = not json_path.exists() or bundle_mod.read_bundle_file(json_path)[1] == sha
        except bundle_mod.BundleError:
            ours = True  # a half-written file: only this freeze writes the name's files
        for path in (json_path, folder / f"{name}.yaml", folder / f"{name}.json.tmp") if ours else ():
            try:
                path.unlink(missing_ok=True)
            except OSError:
                left.append(f"remove {path}")
        try:
            tag = prompt_repo.tag_info(self.paths.prompts, name)
            if tag is not None and f"sha256 {sha}" in (tag[1] or ""):
                prompt_repo.delete_tag(self.paths.prompts, name)
        except Exception:  # noqa: BLE001 (whatever Git says, the user is told what is left)
            left.append(f"git -C {self.paths.prompts} tag -d {name}")
        return ("could not undo everything: " + "; ".join(left)) if left else ""

    def bundle_content(self, name: str, commit: str, run, frozen_at: str, ci: str = "wilson") -> dict:
        """The bundle's content for a prompt version and the run that justified it."""
        ev = self.evaluation.evaluate_run(run.id, ci=ci)
        t = ev.table
        metrics = {
            "cohort": self.study.cohort_name(run.cohort_id),
            "run": run.id,
            "ci": ci,
            "zero_division": ev.zero_division,
            "excluded": ev.excluded,
            "macro_f1": ev.averages["macro_f1"],
            "macro_accuracy": ev.averages["macro_accuracy"],
            "micro_f1": ev.averages["micro_f1"],
            "macro_f1_bootstrap": {k: ev.bootstrap.get(k) for k in ("lo", "hi", "n_resamples", "seed")},
            "per_label": [
                {
                    "label": lab,
                    "n": int(t.loc[lab, "n"]),
                    "support": int(t.loc[lab, "support"]),
                    "accuracy": t.loc[lab, "accuracy"],
                    "accuracy_lo": t.loc[lab, "accuracy_lo"],
                    "accuracy_hi": t.loc[lab, "accuracy_hi"],
                    "precision": t.loc[lab, "precision"],
                    "recall": t.loc[lab, "recall"],
                    "f1": t.loc[lab, "f1"],
                    "f1_lo": t.loc[lab, "f1_lo"] if "f1_lo" in t else None,
                    "f1_hi": t.loc[lab, "f1_hi"] if "f1_hi" in t else None,
                    "f1_undefined": bool(t.loc[lab, "f1_undefined"]),
                }
                for lab in t.index
            ],
        }
        params = json.loads(run.params_json)
        model = {
            k: v for k, v in params.items() if k not in ("api_base", "endpoints", "concurrency", "resolved_endpoints")
        }
        return bundle_mod.build_content(
            name=name,
            vocab=self.vocab,
            prompts=self.prompts.prompt_set(commit),
            model=model,
            parser_version=PARSER_VERSION,
            prompt_commit=commit,
            metrics=metrics,
            frozen_by=self.actor.user,
            frozen_at=frozen_at,
            sections=run.sections.split(","),
            endpoint=self._run_endpoint(run, params),
        )

    @staticmethod
    def _run_endpoint(run, params: dict) -> dict:
        """Where a run sent report text, as a bundle records it (scoring goes there by default)."""
        settings = {k: params.get(k) for k in ("model", "api_base", "endpoints")}
        resolved = params.get("resolved_endpoints")
        return {
            "api_base": params.get("api_base"),
            "endpoints": list(params.get("endpoints") or []),
            "resolved": list(resolved if resolved is not None else model_endpoints(settings)),
            "label": run.endpoint,
        }

    def score_generated(
        self,
        bundle_path: Path,
        reference,
        generated: dict,
        model: str | None = None,
        out: Path | None = None,
        zero_division: str = "zero",
        n_resamples: int = 1000,
        on_progress=None,
        api_base: str | None = None,
        allow_endpoints: list[str] | None = None,
        max_failed_share: float = scoring.MAX_FAILED_SHARE,
        batch: bool = False,
        on_batch_status=None,
    ) -> scoring.ScoreResult:
        """Score generators with a bundle, caching extractions in the study database; report text goes
        only to the bundle's own local endpoint, this study's allowed endpoints or those allowed here.
        batch: the extractions as provider batch jobs, recorded in the study (a restart polls them again)."""
        b = bundle_mod.load_bundle(Path(bundle_path))
        allowed = [*self.config.allowed_endpoints, *(allow_endpoints or [])]
        return scoring.score(
            b,
            reference,
            generated,
            model=model,
            out=out,
            zero_division=zero_division,
            n_resamples=n_resamples,
            cache=StudyExtractionCache(self),
            on_progress=on_progress,
            api_base=api_base,
            allow_endpoints=allowed,
            max_failed_share=max_failed_share,
            engine=self._score_batch_engine(on_batch_status) if batch else None,
        )

    def _score_batch_engine(self, on_status):
        """A batch engine whose jobs are recorded in this study (scoped by their call keys: the same score resumes them)."""
        return batch.BatchEngine(StudyBatchJournal(self), on_status=on_status)

    def test_look(self, bundle: str, cohort: str, ci: str = "wilson", on_progress=None) -> dict:
        """Measure a frozen bundle on a test cohort; the look is recorded (who, when, which bundle) and counted."""
        self.require("run")
        if self.splits.cohort_role(cohort) != "test":
            raise StudyError(f"{cohort!r} is not a test cohort (its role is {self.splits.cohort_role(cohort)})")
        b = self._frozen_bundle(bundle, cohort)
        commit = b.content["prompt_commit"]
        run = self._test_run(cohort, commit, b.model, on_progress)
        ev = self.evaluation.evaluate_run(run.id, ci=ci, test_look=commit)
        with self.session() as s:
            q.add_look(s, self.study.cohort_id(cohort), bundle, b.sha256, run.id, self.actor.user)
            looks = int((q.looks_frame(s, bundle)["bundle"] == bundle).sum())
            q.add_audit(
                s,
                self.actor.user,
                "look",
                "test cohort",
                f"{cohort}/{bundle}",
                None,
                {"bundle": bundle, "sha256": b.sha256, "run": run.id, "looks": looks},
            )
        figures = bundle_figures(ev, cohort, run.id)
        figures.update(
            bundle=bundle, sha256=b.sha256, looks=looks, message=f"test looked at {looks} time{'s' * (looks != 1)}"
        )
        self._write_test_sidecar(bundle, figures)
        return figures

    def _frozen_bundle(self, bundle: str, cohort: str):
        """The bundle this study froze under that name, unchanged since; anything else (a path, a hand-made or
        edited file) is refused, and the refusal is audited like a look."""
        problem = None
        try:
            bundle_mod.check_name(bundle)
        except bundle_mod.BundleError:
            problem = "give a frozen bundle's name (see `workbench bundles`), not a path or a file"
        path = self.paths.bundles / f"{bundle}.json"
        if problem is None and not path.exists():
            problem = "no frozen bundle of that name; freeze a version first (workbench freeze)"
        b = None
        if problem is None:
            b = bundle_mod.load_bundle(path)
            with self.session() as s:
                events = q.list_audit(s, entity="bundle", key=bundle)
            frozen = {json.loads(e).get("sha256") for e in events.loc[events["action"] == "freeze", "new"] if e}
            if b.sha256 not in frozen:
                problem = "this study has no freeze of that bundle with this content (made or edited by hand?)"
        if problem is None:
            return b
        with self.session() as s:
            q.add_audit(
                s, self.actor.user, "look refused", "test cohort", f"{cohort}/{bundle}"[:200], None, {"why": problem}
            )
        raise StudyError(f"test-look {bundle!r}: {problem}; only this study's frozen bundles may look at a test cohort")

    def _test_run(self, cohort: str, commit: str, model: dict, on_progress):
        """The finished run of a bundle's version on the test cohort (labelled now when there is none)."""
        runs = self.runs.runs(cohort)
        runs = runs[
            (runs["prompt_commit"] == commit) & (runs["status"] == "finished") & (runs["model"] == model.get("model"))
        ]
        if len(runs):
            return self.runs.run_info(int(runs.iloc[0]["id"]))
        summary = self.runs.start_run(cohort, prompt_ref=commit, model=model.get("model"), on_progress=on_progress)
        if summary.status != "finished":
            raise StudyError(f"the test run {summary.run_id} did not finish ({summary.message()})")
        return self.runs.run_info(summary.run_id)

    def _write_test_sidecar(self, bundle: str, figures: dict) -> None:
        """The bundle's test figures and look count beside it (outside the hashed content: the count grows)."""
        path = self.paths.bundles / f"{bundle}.test.yaml"
        data = {"note": "test-cohort figures of this bundle; not part of its hashed content", **figures}
        tmp = path.with_suffix(".yaml.tmp")
        tmp.write_text(
            yaml.safe_dump(json.loads(json.dumps(data, default=json_default)), sort_keys=False), encoding="utf-8"
        )
        tmp.replace(path)

    def test_looks(self, bundle: str | None = None) -> pd.DataFrame:
        """Every look at a test cohort (who, when, which bundle)."""
        with self.session() as s:
            return q.looks_frame(s, bundle)

    def _bundle_rows(self) -> pd.DataFrame:
        """Bundles of this study with their hashes and whether they verify."""
        rows = []
        for path in sorted(self.paths.bundles.glob("*.json")):
            try:
                ok, recorded, _ = bundle_mod.verify_bundle(path)
                content, _ = bundle_mod.read_bundle_file(path)
                rows.append(
                    {
                        "name": content.get("name"),
                        "sha256": recorded,
                        "verified": ok,
                        "prompt_commit": content.get("prompt_commit", "")[:8],
                        "model": content.get("model", {}).get("model"),
                        "macro_f1": content.get("metrics", {}).get("macro_f1"),
                        "frozen_by": content.get("frozen_by"),
                        "frozen_at": content.get("frozen_at"),
                        "path": str(path),
                    }
                )
            except bundle_mod.BundleError as exc:
                rows.append({"name": path.stem, "sha256": "", "verified": False, "path": str(path), "error": str(exc)})
        return pd.DataFrame(rows)

    def bundles(self) -> pd.DataFrame:
        """Bundles with how often each was used to look at a test cohort."""
        frame = self._bundle_rows()
        if len(frame):
            counts = self.test_looks()["bundle"].value_counts()
            frame["test_looks"] = frame["name"].map(counts).fillna(0).astype(int)
        return frame

    # ------------------------------------------------------------ robustness of a bundle, with the study's cache

    def default_robustness_pairs(self) -> Path:
        """The shipped synthetic paraphrase / significant-change pairs."""
        return scoring.DEFAULT_PAIRS

    def robustness(self, bundle_path: Path, pairs=None, model: str | None = None) -> scoring.RobustnessResult:
        """Robustness and discrimination of a bundle on text pairs, using the study's extraction cache."""
        b = bundle_mod.load_bundle(Path(bundle_path))
        return scoring.robustness(
            b,
            pairs,
            model=model,  # None: the shipped pairs that fit the bundle's vocabulary
            cache=StudyExtractionCache(self),
            allow_endpoints=list(self.config.allowed_endpoints),
        )


def _report_text_note(content: dict) -> list[str]:
    """Say that a bundle carries few-shot report excerpts, which go to the scoring site's endpoints with every call."""
    labels = content["prompts"]["labels"].values()
    count = sum(len(lab.get("examples") or ()) for lab in labels)
    if not count:
        return []
    return [
        f"the bundle carries {count} few-shot example(s) quoting report text; whoever scores with it sends them to "
        "the scoring site's endpoints in every call: share it only where that text may go (or save a prompt "
        "version whose examples are written, not quoted, and freeze that)"
    ]


def _freeze_message(name: str, user: str, sha: str) -> str:
    """The annotated tag's message: who froze the name and the sha256 of its content."""
    return f"Frozen bundle {name} by {user}\n\nsha256 {sha}"


def _one_line(exc: BaseException, folder: Path) -> str:
    """A failure as one line: a full disk named as such (Git often says only "couldn't write"), else the
    first line of the message."""
    text = (getattr(exc, "stderr", None) or str(exc)).strip()  # Git's own words, not the command line
    low = text.lower()
    if (
        getattr(exc, "errno", None) == errno.ENOSPC
        or "no space left" in low
        or "disk is full" in low
        or _nearly_full(folder)
    ):
        return "the disk is full"
    line = next((part.strip() for part in text.splitlines() if part.strip()), type(exc).__name__)
    return line.removeprefix("stderr: ")[:300]


def _nearly_full(folder: Path) -> bool:
    """Under 1 MiB free where the study lives: a failed write there is the disk's fault."""
    try:
        return shutil.disk_usage(folder).free < 1 << 20
    except OSError:
        return False


def _freeze_faults() -> tuple[type[BaseException], ...]:
    """What can fail while freezing and is the disk's or a refusal's fault, not a bug."""
    return (*db.storage_errors(), *prompt_repo.git_errors(), PromptRepoError, bundle_mod.BundleError, StudyError)


def bundle_figures(ev: Evaluation, cohort: str, run_id: int) -> dict[str, Any]:
    """A frozen bundle's figures on a cohort (a test look): macro F1 with its interval, per label with intervals."""
    t = ev.table
    return {
        "cohort": cohort,
        "run": run_id,
        "macro_f1": finite(ev.averages["macro_f1"]),
        "macro_f1_lo": finite(ev.bootstrap.get("lo", np.nan)),
        "macro_f1_hi": finite(ev.bootstrap.get("hi", np.nan)),
        "per_label": [
            {
                "label": lab,
                "n": int(t.loc[lab, "n"]),
                "support": int(t.loc[lab, "support"]),
                "accuracy": finite(t.loc[lab, "accuracy"]),
                "accuracy_lo": finite(t.loc[lab, "accuracy_lo"]),
                "accuracy_hi": finite(t.loc[lab, "accuracy_hi"]),
                "f1": finite(t.loc[lab, "f1"]),
                "f1_lo": finite(t.loc[lab, "f1_lo"]) if "f1_lo" in t else None,
                "f1_hi": finite(t.loc[lab, "f1_hi"]) if "f1_hi" in t else None,
            }
            for lab in t.index
        ],
    }
