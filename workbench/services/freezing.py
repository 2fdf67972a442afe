"""Freezing a prompt version into a bundle, and scoring generated reports with the study's cache."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from workbench import bundle as bundle_mod
from workbench import scoring
from workbench.core.parsing import PARSER_VERSION
from workbench.store import prompt_repo, queries as q
from workbench.store.prompt_repo import PromptRepoError
from workbench.study import StudyError


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


class FreezeService:
    """Bundles and scoring."""

    def justifying_run(self, prompt_commit: str, cohort: str | None = None):
        """The latest finished run of this prompt version on the development cohort."""
        cohort = cohort or self.default_cohort()
        runs = self.runs(cohort)
        runs = runs[(runs["prompt_commit"] == prompt_commit) & (runs["status"] == "finished")]
        if runs.empty:
            raise StudyError(
                f"no finished run of prompt version {prompt_commit[:8]} on cohort {cohort!r}: run it first "
                f"(workbench run --cohort {cohort} --prompt {prompt_commit[:8]}) so the bundle carries the metrics that justify it")
        asked = list(self.vocab.asked_ids)
        for row in runs.itertuples(index=False):  # newest first: the latest run that covers every asked label
            if not set(asked) - set(json.loads(row.labels_json)):
                return self.run_info(int(row.id))
        latest = int(runs.iloc[0]["id"])
        missing = [lab for lab in asked if lab not in set(json.loads(runs.iloc[0]["labels_json"]))]
        raise StudyError(
            f"run {latest} of prompt version {prompt_commit[:8]} on cohort {cohort!r} does not cover every asked label: "
            f"{len(missing)} of {len(asked)} missing ({', '.join(missing)}); a bundle is justified by a run of all its labels: "
            f"run `workbench run --cohort {cohort} --prompt {prompt_commit[:8]}` (cached answers are reused) and freeze again")

    def default_cohort(self) -> str:
        """The study's development cohort when it exists, else the only cohort; else an error naming the choices."""
        names = self.cohorts()["name"].tolist()
        if self.config.dev_cohort in names:
            return self.config.dev_cohort
        if len(names) == 1:
            return names[0]
        raise StudyError(f"no development cohort {self.config.dev_cohort!r} (dev_cohort in workbench.yaml); "
                         f"choose one with --cohort: {', '.join(names) or '(none yet: import reports first)'}")

    def freeze(self, name: str, prompt_ref: str | None = None, cohort: str | None = None,
               frozen_at: str | None = None, ci: str = "wilson") -> dict:
        """Tag a prompt version and write its bundle (canonical JSON + YAML) with a sha256."""
        self.require("freeze")
        try:
            bundle_mod.check_name(name)  # Git's tag-name rules too, before anything is written
        except bundle_mod.BundleError as exc:
            raise StudyError(str(exc)) from exc
        if name in prompt_repo.tags(self.paths.prompts) or (self.paths.bundles / f"{name}.json").exists():
            raise StudyError(f"the name {name!r} is already frozen; frozen names cannot be moved or reused")
        commit = self.prompt_commit(prompt_ref)
        run = self.justifying_run(commit, cohort)
        content = self.bundle_content(name, commit, run, frozen_at or q.now(), ci)
        bundle_mod.bundle_bytes(content)  # fails early (before the tag) if the content cannot be serialised
        try:
            prompt_repo.create_tag(self.paths.prompts, name, commit, f"Frozen bundle {name} by {self.actor.user}\n\n"
                                   f"sha256 {bundle_mod.content_sha256(content)}", self.actor.identity())
        except PromptRepoError as exc:
            raise StudyError(str(exc)) from exc
        try:
            json_path, yaml_path, sha = bundle_mod.write_bundle(self.paths.bundles, content)
            with self.session() as s:
                q.add_audit(s, self.actor.user, "freeze", "bundle", name, None, {"sha256": sha, "commit": commit, "run": run.id})
        except BaseException:
            prompt_repo.delete_tag(self.paths.prompts, name)  # no bundle, no tag: the name stays free to use
            raise
        return {"name": name, "sha256": sha, "json": json_path, "yaml": yaml_path, "commit": commit, "run": run.id}

    def bundle_content(self, name: str, commit: str, run, frozen_at: str, ci: str = "wilson") -> dict:
        """The bundle's content for a prompt version and the run that justified it."""
        ev = self.evaluate_run(run.id, ci=ci)
        t = ev.table
        metrics = {
            "cohort": self._cohort_name(run.cohort_id), "run": run.id, "ci": ci, "zero_division": ev.zero_division,
            "excluded": ev.excluded, "macro_f1": ev.averages["macro_f1"], "macro_accuracy": ev.averages["macro_accuracy"],
            "micro_f1": ev.averages["micro_f1"], "macro_f1_bootstrap": {k: ev.bootstrap.get(k) for k in ("lo", "hi", "n_resamples", "seed")},
            "per_label": [
                {"label": lab, "n": int(t.loc[lab, "n"]), "support": int(t.loc[lab, "support"]),
                 "accuracy": t.loc[lab, "accuracy"], "accuracy_lo": t.loc[lab, "accuracy_lo"], "accuracy_hi": t.loc[lab, "accuracy_hi"],
                 "precision": t.loc[lab, "precision"], "recall": t.loc[lab, "recall"], "f1": t.loc[lab, "f1"],
                 "f1_lo": t.loc[lab, "f1_lo"] if "f1_lo" in t else None, "f1_hi": t.loc[lab, "f1_hi"] if "f1_hi" in t else None,
                 "f1_undefined": bool(t.loc[lab, "f1_undefined"])}
                for lab in t.index],
        }
        params = json.loads(run.params_json)
        model = {k: v for k, v in params.items() if k not in ("api_base", "endpoints", "concurrency", "resolved_endpoints")}
        return bundle_mod.build_content(
            name=name, vocab=self.vocab, prompts=self.prompt_set(commit), model=model, parser_version=PARSER_VERSION,
            prompt_commit=commit, metrics=metrics, frozen_by=self.actor.user, frozen_at=frozen_at,
            sections=run.sections.split(","), endpoint=self._run_endpoint(run, params))

    @staticmethod
    def _run_endpoint(run, params: dict) -> dict:
        """Where a run sent report text, as a bundle records it (scoring goes there by default)."""
        from workbench.services.runs import model_endpoints

        settings = {k: params.get(k) for k in ("model", "api_base", "endpoints")}
        resolved = params.get("resolved_endpoints")
        return {"api_base": params.get("api_base"), "endpoints": list(params.get("endpoints") or []),
                "resolved": list(resolved if resolved is not None else model_endpoints(settings)), "label": run.endpoint}

    def bundles(self) -> pd.DataFrame:
        """Bundles of this study with their hashes and whether they verify."""
        rows = []
        for path in sorted(self.paths.bundles.glob("*.json")):
            try:
                ok, recorded, _ = bundle_mod.verify_bundle(path)
                content, _ = bundle_mod.read_bundle_file(path)
                rows.append({"name": content.get("name"), "sha256": recorded, "verified": ok, "prompt_commit": content.get("prompt_commit", "")[:8],
                             "model": content.get("model", {}).get("model"), "macro_f1": content.get("metrics", {}).get("macro_f1"),
                             "frozen_by": content.get("frozen_by"), "frozen_at": content.get("frozen_at"), "path": str(path)})
            except bundle_mod.BundleError as exc:
                rows.append({"name": path.stem, "sha256": "", "verified": False, "path": str(path), "error": str(exc)})
        return pd.DataFrame(rows)

    def score_generated(self, bundle_path: Path, reference, generated: dict, model: str | None = None,
                        out: Path | None = None, zero_division: str = "zero", n_resamples: int = 1000,
                        on_progress=None, api_base: str | None = None,
                        allow_endpoints: list[str] | None = None,
                        max_failed_share: float = scoring.MAX_FAILED_SHARE) -> scoring.ScoreResult:
        """Score generators with a bundle, caching extractions in the study database; report text goes
        only to the bundle's own local endpoint, this study's allowed endpoints or those allowed here."""
        b = bundle_mod.load_bundle(Path(bundle_path))
        allowed = [*self.config.allowed_endpoints, *(allow_endpoints or [])]
        return scoring.score(b, reference, generated, model=model, out=out, zero_division=zero_division,
                             n_resamples=n_resamples, cache=StudyExtractionCache(self), on_progress=on_progress,
                             api_base=api_base, allow_endpoints=allowed, max_failed_share=max_failed_share)
