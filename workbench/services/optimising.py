"""Assisted optimisation: cohort roles and tuning/validation splits, the locked test cohort, revisions
proposed from the error notes (a model's reflective proposal or the offline proposer), each one
evaluated on tuning and validation before it is shown, and `optimise` rounds.

What may be read where is decided here: suggestions and few-shot curation read only the tuning
part of a development cohort; the validation part is only ever measured; a test cohort's
metrics are computed only through a frozen bundle and every such look is recorded and counted.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from workbench.core import metrics, parsing, proposals, screening, splits
from workbench.core.prompts import LabelPrompt, PromptSet, call_key, dump_label_prompt
from workbench.core.text import compose_text
from workbench.core.vocab import derive_frame
from workbench.errors import UserError
from workbench.importers import read_phrase_lists
from workbench.labeller import labelling, llm, rules
from workbench.labeller.endpoints import is_offline
from workbench.labeller.labelling import model_config
from workbench.services.base import Service, StudyContext
from workbench.services.evaluation import paired_macro, refuse_same_run
from workbench.services.prompting import label_yaml
from workbench.services.results import (
    DraftsEvaluation,
    EditEvaluation,
    OptimiseReport,
    PartComparison,
    PartMetrics,
    StoredProposal,
    Suggestion,
    json_default,
)
from workbench.services.runs import cache_entries, prediction_rows
from workbench.store import prompt_repo
from workbench.store import queries as q
from workbench.study import StudyError

if TYPE_CHECKING:  # collaborators' types, for readers and type checkers only
    from workbench.services.evaluation import EvaluationService
    from workbench.services.model_path import ModelPathService
    from workbench.services.prompting import PromptsService
    from workbench.services.runs import RunsService
    from workbench.services.splits import SplitsService
    from workbench.services.study import StudyService
    from workbench.services.triage import TriageService
    from workbench.store.tables import Run

COHORT_ROLES = ("development", "validation", "test", "external")
PROPOSERS = ("auto", "offline", "llm")
PROPOSER_MAX_TOKENS = 2000
MAX_CASES = 20  # failing cases shown to a model in one proposal call
MAX_CASE_CHARS = 1500

PROPOSER_SYSTEM = (
    "You improve the prompt of one label of a chest X-ray report labeller. You are shown the label's current "
    "prompt (YAML), reports it answered wrongly on the tuning set, the labeller's answers and the radiologists' "
    "error notes. Propose a revision that fixes these errors without breaking correct answers. Reply with ONE "
    'JSON object and nothing else: {"edit": {...}, "rationale": "..."}. "edit" holds only the fields you '
    "change, each with its full new value: definition (text), look_for (list of phrases), do_not_label_when "
    "(list of rules; put exact phrases in single quotes), hedged (positive|negative), temporal (mapping of "
    "resolved/stable/improving/prior to positive|negative), examples (list of {text, value 0|1, why, "
    "source_report_id}); a new example must come from one of the cases shown, with its id."
)


class OptimisingService(Service):
    """Suggestions, proposals and optimisation rounds (splits and the test lock are SplitsService's)."""

    def __init__(
        self,
        ctx: StudyContext,
        study: StudyService,
        splits: SplitsService,
        runs: RunsService,
        costs: ModelPathService,
        prompts: PromptsService,
        evaluation: EvaluationService,
        triage: TriageService,
    ) -> None:
        super().__init__(ctx)
        self.study = study
        self.splits = splits
        self.runs = runs
        self.costs = costs
        self.prompts = prompts
        self.evaluation = evaluation
        self.triage = triage

    # ------------------------------------------------------------ cohort roles and splits

    # ------------------------------------------------------------ the test-cohort lock

    # ------------------------------------------------------------ metrics by part

    def run_cohort(self, run_id: int) -> str:
        """The name of the cohort a run labelled."""
        return self.study.cohort_name(self.runs.run_info(run_id).cohort_id)

    def evaluate_parts(
        self, run_id: int, ci: str = "wilson", n_resamples: int = 1000, zero_division: str | None = None
    ) -> dict[str, PartMetrics]:
        """Per part (tuning, validation): per-label metrics with intervals, macro F1 with a bootstrap interval."""
        zero_division = self.evaluation.macro_policy(zero_division)
        run = self.runs.run_info(run_id)
        parts = self.splits.split_parts(self.study.cohort_name(run.cohort_id))
        if not parts:
            raise StudyError("the run's cohort is not split into tuning and validation parts (workbench split)")
        y_true, y_pred, _ = self.evaluation.evaluation_inputs(run_id)
        return {
            part: _part_metrics(
                y_true, y_pred, [r for r in y_true.index if parts.get(r) == part], ci, n_resamples, zero_division
            )
            for part in splits.PARTS
        }

    def compare_by_part(self, run_a: int, run_b: int) -> dict[str, PartComparison]:
        """Two runs on a split cohort: per part, macro F1 of each and the per-label McNemar table (Holm within the part)."""
        refuse_same_run(run_a, run_b)
        a, b = self.runs.run_info(run_a), self.runs.run_info(run_b)
        if a.cohort_id != b.cohort_id:
            raise StudyError(f"runs {run_a} and {run_b} are on different cohorts")
        parts = self.splits.split_parts(self.study.cohort_name(a.cohort_id))
        if not parts:
            raise StudyError("the runs' cohort is not split into tuning and validation parts (workbench split)")
        y_true, pred_a, _ = self.evaluation.evaluation_inputs(run_a, extra_commits=(b.prompt_commit,))
        _, pred_b, _ = self.evaluation.evaluation_inputs(run_b, extra_commits=(a.prompt_commit,))
        labels = [lab for lab in y_true.columns if lab in pred_b.columns]
        policy = self.evaluation.macro_policy()
        out = {}
        for part in splits.PARTS:
            ids = [r for r in y_true.index if parts.get(r) == part]
            table = metrics.compare_labels(
                y_true.loc[ids, labels], pred_a.loc[ids, labels], pred_b.reindex(ids)[labels], zero_division=policy
            )
            macro_a, macro_b = paired_macro(table, policy)
            out[part] = PartComparison(
                table=table,
                macro_f1_a=metrics.finite(macro_a.value),
                macro_f1_b=metrics.finite(macro_b.value),
                macro_labels=macro_b.describe(),
            )
        return out

    def history_by_part(self, cohort: str) -> pd.DataFrame:
        """Every finished run on a split cohort: macro F1 on tuning and on validation, and the gap between them."""
        parts = self.splits.split_parts(cohort)
        if not parts:
            raise StudyError(f"{cohort!r} is not split yet: workbench split {cohort}")
        runs = self.runs.runs(cohort)
        runs = runs[runs["status"].isin(["finished", "incomplete"])]
        reference = self.study.reference_matrix(cohort) if len(runs) else None
        policy = self.evaluation.macro_policy()
        inputs = {
            int(run.id): self.evaluation.evaluation_inputs(int(run.id), reference=reference)[:2]
            for run in runs.itertuples(index=False)
        }
        # one label set for every row and both parts: the trend and each gap compare like with like
        same = frozenset().union(*(_same_labels(t, [p], parts, policy) for t, p in inputs.values()))
        rows = []
        for run in runs.itertuples(index=False):
            y_true, y_pred = inputs[int(run.id)]
            row = {
                "run": int(run.id),
                "version": prompt_repo.ordinal(self.paths.prompts, run.prompt_commit),
                "prompt": run.prompt_commit[:8],
            }
            for part in splits.PARTS:
                keep = [r for r in y_true.index if parts.get(r) == part]
                table = metrics.label_metrics(y_true.loc[keep], y_pred.loc[keep], zero_division=policy)
                undefined = table["f1_undefined"].astype(bool) | table.index.isin(list(same))
                figure = metrics.macro_figure(table["f1"], undefined, policy, paired=bool(same))
                row[f"{part}_macro_f1"] = figure.value
                row[f"{part}_macro_labels"] = figure.describe()
            row["gap"] = row["tuning_macro_f1"] - row["validation_macro_f1"]
            rows.append(row)
        frame = pd.DataFrame(
            rows,
            columns=[
                "run",
                "version",
                "prompt",
                "tuning_macro_f1",
                "validation_macro_f1",
                "gap",
                "tuning_macro_labels",
                "validation_macro_labels",
            ],
        )
        frame = frame.sort_values(["version", "run"]).reset_index(drop=True)
        frame.attrs["macro_labels"] = sorted(set(frame["tuning_macro_labels"]) | set(frame["validation_macro_labels"]))
        return frame

    # ------------------------------------------------------------ labelling a candidate prompt through the cache

    def _label_with(self, run, ps, label: str, report_ids: list[str], on_calls=None) -> tuple[pd.DataFrame, dict]:
        """(report_id -> value, evidence) of one label under prompt set ps, and the call counts.

        Same engine, governance, call cache and parser as a run: only calls whose rendered messages
        changed are made. on_calls sees the labelling's progress (labelling.Progress), as a run's bar does.
        """
        settings = self.runs.settings_from_params(json.loads(run.params_json))
        self.runs.check_endpoint(settings)
        cfg = labelling.model_config(settings)
        with self.session() as s:
            reports = q.reports_frame(s, ids=report_ids)
        labels = [label] if run.mode == "per_label" else json.loads(run.labels_json)
        requests = self.runs.build_requests(ps, reports, labels, run.mode, run.sections.split(","), cfg, set())
        rows: list[dict] = []

        def store(answers: list) -> None:
            rows.extend({**row, "made": True} for row in prediction_rows(answers))
            with self.session() as s:
                q.put_cached_calls(s, cache_entries(cfg, answers))

        done = labelling.label_calls(
            requests,
            cfg,
            self.runs.cached_replies,
            store,
            store_reused=lambda answers: rows.extend({**r, "made": False} for r in prediction_rows(answers)),
            on_progress=on_calls,
        )
        counts = {
            "calls": done.calls,
            "made": done.made,
            "reused": done.reused,
            "cost": done.cost,
            "prompt_tokens": done.prompt_tokens,
            "completion_tokens": done.completion_tokens,
        }
        frame = pd.DataFrame(
            rows,
            columns=[*q.PREDICTION_COLUMNS, "made"],
        )
        frame = frame[frame["label"] == label].drop_duplicates("report_id").set_index("report_id")
        return frame.reindex(report_ids)[["value", "evidence", "made"]], counts

    # ------------------------------------------------------------ suggestions

    def _tuning_material(
        self,
        run,
        label: str,
        pred: pd.Series | None = None,
        evidence: pd.Series | None = None,
        inputs: tuple | None = None,
    ):
        """The tuning part for one label: reference, predictions, texts, evidence and usable notes.

        inputs: the run's (reference, predictions) when the caller already has them (optimise rounds).
        """
        cohort = self.study.cohort_name(run.cohort_id)
        parts = self.splits.split_parts(cohort)
        if not parts:
            raise StudyError(
                f"split {cohort!r} into tuning and validation parts first: workbench split {cohort} "
                "--validation 0.3 --seed 0 (suggestions are checked on the validation part)"
            )
        y_true, y_pred = inputs if inputs is not None else self.evaluation.evaluation_inputs(run.id)[:2]
        ids = [r for r in y_true.index if parts.get(r) == "tuning"]
        allowed = self.splits.tuning_reports(ids)  # belt and braces: never a validation or test report
        notes = self.triage.notes(label)
        wrong = set(notes.loc[notes["reference_wrong"].astype(bool), "report_id"])
        known = y_true[label].notna()
        ids = [r for r in ids if r in allowed and r not in wrong and known.loc[r]]
        notes = notes[notes["report_id"].isin(set(ids)) & ~notes["reference_wrong"].astype(bool)]
        values = (y_pred[label] if pred is None else pred).reindex(ids)
        ids = [r for r in ids if not pd.isna(values.loc[r])]
        if evidence is None:
            preds = self.runs.predictions(run.id)
            evidence = preds[preds["label"] == label].set_index("report_id")["evidence"]

        with self.session() as s:
            reports = q.reports_frame(s, ids=ids).set_index("report_id")
        sections = run.sections.split(",")
        texts = {
            row.Index: compose_text(row.findings, row.impression, row.text, sections) for row in reports.itertuples()
        }
        cases = pd.DataFrame(
            {
                "report_id": ids,
                "text": [texts[r] for r in ids],
                "reference": y_true.loc[ids, label].astype(int).to_numpy(),
                "prediction": values.loc[ids].astype(int).to_numpy(),
                "evidence": [str(evidence.get(r, "") or "") for r in ids],
            }
        )
        return cases, notes

    def phrase_lists(self, path) -> dict[str, dict[str, list[str]]]:
        """An outside phrase table (CheXpert labeler format) read where it lies, by label id ({} for None)."""
        if path is None:
            return {}

        if not Path(path).is_file():
            raise StudyError(f"phrase list {str(path)!r} not found (a CSV with observation, list, raw_phrase)")
        return read_phrase_lists(path, self.vocab)

    def _hedge_clauses(self, ps, label: str, cases: pd.DataFrame) -> list[tuple[str, int]]:
        """(clause, reference) for every tuning mention of a label that hedged wording sets aside."""
        cues = ps.task.cue_lists()
        lp = dataclasses.replace(ps.label(label), hedged="negative")
        return [
            (d["clause"], int(ref))
            for text, ref in zip(cases["text"], cases["reference"], strict=False)
            for d in rules.explain(text, lp, cues)
            if d["outcome"] == "hedged"
        ]

    def _hedge_convention(self, ps, material: dict) -> dict:
        """Per label, the hedge cues the reference does not count (None: none it counts hedges the label),
        from every label's hedged mentions on tuning, pooled; material: label -> its tuning cases."""
        clauses = {lab: self._hedge_clauses(ps, lab, cases) for lab, cases in material.items()}
        convention = proposals.hedge_convention([c for rows in clauses.values() for c in rows], ps.task.cue_lists())
        return {lab: proposals.uncounted_hedges(convention, rows) for lab, rows in clauses.items()}

    def _offline_proposal(
        self,
        ps,
        label: str,
        cases: pd.DataFrame,
        notes: pd.DataFrame,
        level: int = 0,
        phrases: dict | None = None,
        hedges: dict | None = None,
        avoid: frozenset = frozenset(),
    ) -> proposals.ProposalResult:
        """Mine candidates from the tuning disagreements and notes (and an outside phrase list); score
        them with the rule-based labeller on tuning only."""
        cues = ps.task.cue_lists()
        lp = ps.label(label)

        def label_fn(prompt: LabelPrompt, texts: list[str]) -> np.ndarray:
            return np.array([rules.label_one(t, prompt, cues)["value"] for t in texts], dtype=int)

        tuning = proposals.Tuning(
            cases["report_id"].tolist(),
            cases["text"].tolist(),
            cases["reference"].to_numpy(),
            cases["prediction"].to_numpy(),
        )
        pos = cases.loc[cases["reference"] == 1, "text"].tolist()
        neg = cases.loc[cases["reference"] == 0, "text"].tolist()
        shown = cases[(cases["reference"] == 1) | (cases["prediction"] == 1)]
        candidates = proposals.mine_candidates(
            lp,
            shown,
            pos,
            neg,
            notes,
            cues=cues,
            phrases=(phrases or {}).get(label),
            uncounted_hedges=(hedges or {}).get(label),
        )
        return proposals.offline_propose(
            lp,
            tuning,
            label_fn,
            candidates,
            source="offline proposer",
            level=level,
            cues=cues,
            avoid=avoid,
            vocab=self.vocab,
        )

    def _llm_proposal(
        self,
        ps,
        label: str,
        cases: pd.DataFrame,
        notes: pd.DataFrame,
        model: str | None,
        api_base: str | None = None,
        attribute_cases: pd.DataFrame | None = None,
    ) -> proposals.ProposalResult:
        """One reflective call: the label's prompt, the failing tuning cases and attribute disagreements, the notes;
        a strict structured edit back. The call goes through the labelling path (labelling.label_calls) like a
        run's: the same governance, call cache (only a usable reply is kept), counts and call records, and a
        reply that is not a usable edit is kept with the call's record (and returned, to be shown)."""
        settings = self.runs.labeller_settings(model, max_tokens=PROPOSER_MAX_TOKENS, api_base=api_base)
        if is_offline(settings.get("model", "")):
            raise StudyError(
                "the model proposer needs a language model; the study's labeller is the offline one "
                "(use --proposer offline, or --model openai/NAME with --api-base)"
            )
        self.runs.check_endpoint(settings)
        cfg = model_config(settings)
        failing = cases[cases["reference"] != cases["prediction"]].head(MAX_CASES)
        attribute_cases = (attribute_cases if attribute_cases is not None else pd.DataFrame()).head(MAX_CASES)
        if failing.empty and attribute_cases.empty:
            return proposals.ProposalResult("empty", "no failing tuning case for this label")
        messages = _proposer_messages(ps.label(label), self.vocab.names()[label], failing, notes, attribute_cases)
        request = llm.CallRequest(
            call_key(messages, {**labelling.call_params(cfg), "purpose": "proposer"}),
            messages,
            {"mode": "proposer", "labels": [label]},
        )
        reading = _ProposerReply(ps.label(label), set(failing["report_id"]), f"model proposer ({cfg.model})")
        counts = labelling.label_calls(
            [request],
            cfg,
            self.runs.cached_replies,
            lambda answers: self._store_proposer_call(cfg, answers),
            decide=reading,
        )
        result = reading.result or proposals.ProposalResult("call_error", "no reply")
        with self.session() as s:
            q.add_audit(
                s,
                self.actor.user,
                "propose",
                "prompt",
                label,
                None,
                {
                    "proposer": reading.source,
                    "status": result.status,
                    "cached": counts.reused > 0,
                    "cases": len(failing),
                    "prompt_tokens": counts.prompt_tokens,
                    "completion_tokens": counts.completion_tokens,
                    "cost": counts.cost if counts.made else None,
                },
            )
        if result.edit is not None:
            edit = proposals.Edit(**{**result.edit.__dict__, "note_ids": tuple(int(i) for i in notes["id"])})
            result = dataclasses.replace(result, edit=edit)
        return dataclasses.replace(result, calls_made=counts.made, reply="" if result.status == "ok" else reading.text)

    def _store_proposer_call(self, cfg, answers: list) -> None:
        """A proposer call's record, as a run's: the reply cached when it is a usable edit; the call's facts (tokens,
        cost, latency) and, when it is not usable, the raw reply kept with them."""
        with self.session(write=True) as s:
            q.put_cached_calls(s, cache_entries(cfg, answers))
            q.put_call_facts(s, labelling.call_facts(None, answers))
            q.put_call_replies(s, labelling.failed_replies(answers))

    def suggest_failing(
        self,
        run_id: int | None = None,
        proposer: str = "auto",
        model: str | None = None,
        api_base: str | None = None,
        phrase_list=None,
    ) -> list[Suggestion]:
        """A suggestion for every label with a disagreement on the tuning part."""
        run_id = run_id if run_id is not None else self._latest_dev_run_id()
        queue = self.triage.disagreements(run_id)
        failing = [lab for lab in self.vocab.asked_ids if lab in set(queue["label"])]
        hedges = (
            None
            if self._uses_model(proposer, model) or not failing
            else self._run_hedge_convention(self.runs.run_info(run_id))
        )
        return [self.suggest(lab, run_id, proposer, model, api_base, phrase_list, hedges=hedges) for lab in failing]

    def _run_hedge_convention(self, run) -> dict:
        """The hedge convention from every predicted label's tuning part of a run (see _hedge_convention)."""
        inputs = self.evaluation.evaluation_inputs(run.id)[:2]
        material = {
            lab: self._tuning_material(run, lab, inputs=inputs)[0]
            for lab in self.vocab.asked_ids
            if lab in inputs[1].columns
        }
        return self._hedge_convention(self.prompts.prompt_set(run.prompt_commit), material)

    def suggest(
        self,
        label: str,
        run_id: int | None = None,
        proposer: str = "auto",
        model: str | None = None,
        api_base: str | None = None,
        phrase_list=None,
        hedges: dict | None = None,
    ) -> Suggestion:
        """Propose a revision of one label from its tuning disagreements and notes, evaluated on tuning and
        validation before it is shown; stored as a proposal (offered only when validation does not drop).
        hedges: the run's hedge convention when the caller has it (suggest_failing computes it once)."""
        self.require("edit_prompts")
        label = self.prompts.asked_label(label)
        run = self.runs.run_info(run_id if run_id is not None else self._latest_dev_run_id())
        self._require_run_covers(run, [label], "suggest")
        ps = self.prompts.prompt_set(run.prompt_commit)
        cases, notes = self._tuning_material(run, label)
        if hedges is None and not self._uses_model(proposer, model):
            hedges = self._run_hedge_convention(run)
        attribute_cases = self._attribute_cases(run, label, cases) if self._uses_model(proposer, model) else None
        result = self._propose(
            ps,
            label,
            cases,
            notes,
            proposer,
            model,
            api_base,
            phrases=self.phrase_lists(phrase_list),
            hedges=hedges,
            attribute_cases=attribute_cases,
        )
        return self._record(run, label, result, ps)

    def _attribute_cases(self, run, label: str, cases: pd.DataFrame) -> pd.DataFrame:
        """The label's attribute disagreements on the tuning reports of cases (presence right, an attribute
        differs), with the report text: what the model proposer is shown beside the failing cases."""
        if label not in self.vocab.attribute_specs():
            return pd.DataFrame(columns=["report_id", "detail", "text"])
        queue = self.triage.disagreements(run.id, label=label, kind="attribute")
        texts = cases.set_index("report_id")["text"]
        queue = queue[queue["report_id"].isin(set(texts.index))]
        return pd.DataFrame(
            {
                "report_id": queue["report_id"].to_numpy(),
                "detail": queue["detail"].to_numpy(),
                "text": [texts[r] for r in queue["report_id"]],
            }
        )

    def _uses_model(self, proposer: str, model: str | None) -> bool:
        """Whether a suggestion goes to the model proposer (else the offline one)."""
        if proposer not in PROPOSERS:
            raise StudyError(f"proposer must be one of {', '.join(PROPOSERS)}, got {proposer!r}")
        return proposer == "llm" or (
            proposer == "auto" and bool(model or not is_offline(str(self.config.labeller.get("model", ""))))
        )

    def _propose(
        self,
        ps,
        label,
        cases,
        notes,
        proposer: str,
        model: str | None,
        api_base: str | None = None,
        level: int = 0,
        phrases: dict | None = None,
        hedges: dict | None = None,
        avoid: frozenset = frozenset(),
        attribute_cases: pd.DataFrame | None = None,
    ) -> proposals.ProposalResult:
        """Dispatch to the model proposer or the offline one (level > 0: a smaller edit after a rejection)."""
        if self._uses_model(proposer, model):
            return self._llm_proposal(ps, label, cases, notes, model, api_base, attribute_cases)
        return self._offline_proposal(ps, label, cases, notes, level, phrases, hedges, avoid)

    def _require_run_covers(self, run, labels: list[str], command: str) -> None:
        """Refuse, naming the labels and the command to run, when the run has no predictions for some of labels."""
        covered = json.loads(run.labels_json or "[]")
        missing = [lab for lab in labels if lab not in set(covered)]
        if not missing:
            return
        cohort = self.study.cohort_name(run.cohort_id)
        instead = (
            f", or {command} only what it covers: --labels {','.join(covered)}"
            if command == "optimise" and covered
            else ""
        )
        raise UserError(
            f"run {run.id} labelled {len(covered)} of {len(self.vocab.asked_ids)} asked labels and lacks "
            f"{len(missing)} that {command} needs: {', '.join(missing)}; label them first with "
            f"`workbench run --cohort {cohort} --prompt {run.prompt_commit[:8]}` (cached answers are reused) "
            f"and {command} with --run of that run{instead}"
        )

    def development_cohort(self) -> str:
        """The study's development cohort, found by its role (dev_cohort in workbench.yaml only breaks a tie)."""
        with self.session() as s:
            roles = q.cohort_roles(s)
        dev = sorted(name for name, role in roles.items() if role == "development")
        if len(dev) == 1:
            return dev[0]
        if self.config.dev_cohort in dev:
            return self.config.dev_cohort
        if not dev:
            raise StudyError(
                "no development cohort: import reports (`workbench import reports FILE --cohort NAME`) or give "
                "a cohort that role (`workbench cohort-role NAME development`)"
            )
        raise StudyError(
            f"several development cohorts ({', '.join(dev)}): pass --run N, or set dev_cohort in workbench.yaml"
        )

    def _latest_dev_run_id(self) -> int:
        """The id of the newest finished run on the development cohort."""
        cohort = self.development_cohort()
        runs = self.runs.runs(cohort)
        runs = runs[runs["status"] == "finished"]
        if runs.empty:
            raise StudyError(
                f"no finished run on the development cohort {cohort!r}: `workbench run --cohort {cohort}` "
                "first (or pass --run N)"
            )
        return int(runs.iloc[0]["id"])

    def _record(self, run: Run, label: str, result: proposals.ProposalResult, ps: PromptSet) -> Suggestion:
        """Evaluate an ok proposal, store it with its verdict, and return what the engineer is shown."""
        run_id = q.stored_id(run)
        shown: dict[str, Any] = {}  # the edit, and for an ok one its evaluation, verdict and diff
        stored: dict[str, Any] = {"reply": result.reply} if result.reply else {}  # an unusable reply, to be read
        proposed = result.edit
        contradictions = self._contradictions(ps, result)
        if contradictions and proposed is not None:  # an LLM cannot follow it: not worth a call, never offered
            result = dataclasses.replace(result, status="inconsistent", detail=contradictions)
            shown["edit"] = proposed.to_dict()
        if result.status == "ok" and proposed is not None:
            new_lp = proposals.apply_edit(ps.label(label), proposed.fields)
            evaluation = self.evaluate_edit(run_id, new_lp)
            # per-report answers are neither kept nor shown: the evaluation as proposal() gives it back
            stored = {k: v for k, v in evaluation.to_dict().items() if k not in ("values", "evidence")}
            shown.update(
                edit=proposed.to_dict(),
                evaluation=stored,
                offered=evaluation.offered,
                diff=_yaml_diff(ps.label(label), new_lp),
            )
            status = "offered" if evaluation.offered else "not offered"
        else:
            status = result.status
        edit = result.edit.to_dict() if result.edit else {}
        with self.session() as s:
            row = q.add_proposal(
                s,
                label=label,
                author=self.actor.user,
                source=edit.get("source", "") or "none",
                status=status,
                base_commit=run.prompt_commit,
                run_id=run_id,
                edit_json=json.dumps(edit, default=json_default),
                evaluation_json=json.dumps(stored, default=json_default),
                note_ids_json=json.dumps(edit.get("note_ids", [])),
            )
            proposal_id = q.stored_id(row)
        return Suggestion(
            label=label,
            status=result.status,
            detail=result.detail,
            run=run_id,
            reply=result.reply,
            proposal=proposal_id,
            proposal_status=status,
            **shown,
        )

    def _contradictions(self, ps, result: proposals.ProposalResult) -> str:
        """Why an ok proposal would make its label's prompt contradict itself ("" when it would not)."""
        if result.status != "ok" or result.edit is None:
            return ""
        old = ps.label(result.edit.label)
        found = self.prompts.new_contradictions(old, proposals.apply_edit(old, result.edit.fields), ps.task.cue_lists())
        return "; ".join(f"[{f.kind}] {f.message}" for f in found)

    def evaluate_edit(
        self,
        run_id: int,
        new_lp: LabelPrompt,
        base_ps=None,
        base_pred: pd.Series | None = None,
        inputs: tuple | None = None,
        tuning_ids=None,
        on_calls=None,
    ) -> EditEvaluation:
        """Label tuning and validation with the revised label (through the call cache); per part: F1 before
        and after, fixed and broken cases; on validation the exact McNemar verdict. Offered only when
        validation does not get worse.

        tuning_ids (frugal optimise): ask only these tuning reports (a screen's, answered from the cache) and
        carry the rest of tuning over from the answers before; the result names them (carried) and its tuning
        figures are then an estimate. Validation is always asked in full: it alone decides.
        """
        run = self.runs.run_info(run_id)
        cohort = self.study.cohort_name(run.cohort_id)
        parts = self.splits.split_parts(cohort)
        label = new_lp.label
        base_ps = base_ps or self.prompts.prompt_set(run.prompt_commit)
        new_ps = base_ps.with_label(new_lp)
        y_true, y_pred = inputs if inputs is not None else self.evaluation.evaluation_inputs(run_id)[:2]
        leaked = new_ps.example_report_ids() | base_ps.example_report_ids()
        known = y_true[label].notna()
        ids = [r for r in y_true.index if r in parts and r not in leaked and known.loc[r]]
        before = (y_pred[label] if base_pred is None else base_pred).reindex(ids)
        wanted = None if tuning_ids is None else set(tuning_ids)
        asked = {
            part: [r for r in ids if parts[r] == part and (part != "tuning" or wanted is None or r in wanted)]
            for part in splits.PARTS
        }
        carried = tuple(r for r in ids if parts[r] == "tuning" and wanted is not None and r not in wanted)
        started = time.perf_counter()
        after, counts = self._label_with(
            run, new_ps, label, [r for part in splits.PARTS for r in asked[part]], on_calls=on_calls
        )
        counts["seconds"] = round(time.perf_counter() - started, 3)
        made = after["made"].fillna(False).astype(bool)  # where the calls went, per part
        counts["by_part"] = {part: int(made.loc[asked[part]].sum()) for part in splits.PARTS}
        values = after["value"].astype(float).reindex(ids)
        values.loc[list(carried)] = before.loc[list(carried)]  # not asked: the answer before stands in for it
        by_part = {}
        for part in splits.PARTS:
            keep = [r for r in ids if parts[r] == part]
            by_part[part] = _compare_part(
                y_true.loc[keep, [label]], before.loc[keep].to_frame(label), values.loc[keep].to_frame(label)
            )
        by_part["tuning"]["carried"] = len(carried)
        val = by_part["validation"]
        worse = (
            (not pd.isna(val["delta_f1"]) and val["delta_f1"] < 0)
            or val["verdict"] == "worse"
            or (pd.isna(val["delta_f1"]) and val["broken"] > val["fixed"])
        )
        return EditEvaluation(
            label=label,
            calls=counts,
            parts=by_part,
            offered=not worse,
            why=(
                "validation gets worse: not offered"
                if worse
                else "validation does not drop" + (f" (McNemar: {val['verdict']})" if val["verdict"] else "")
            ),
            values=after["value"].to_dict(),
            evidence=after["evidence"].to_dict(),
            carried=carried,
        )

    def evaluate_drafts(self, run_id: int | None = None, labels: list[str] | None = None) -> DraftsEvaluation:
        """Your drafts (and uncommitted file edits) labelled through the call cache on tuning and validation,
        beside the run of the committed version: per label F1 before and after, fixed and broken cases and
        the McNemar verdict on validation, and macro F1 per part before and after. Nothing is committed."""
        self.require("edit_prompts")
        run_id = run_id if run_id is not None else self._latest_dev_run_id()
        run = self.runs.run_info(run_id)
        wanted = [self.prompts.asked_label(lab) for lab in labels] if labels else self.prompts.pending_labels()
        if not wanted:
            raise UserError("no drafts to evaluate: edit one first (`workbench prompts set`, `prompts edit`, `accept`)")
        cohort = self.study.cohort_name(run.cohort_id)
        parts = self.splits.split_parts(cohort)
        if not parts:
            raise StudyError(f"split {cohort!r} into tuning and validation parts first: workbench split {cohort}")
        base_ps = self.prompts.prompt_set(run.prompt_commit)
        y_true, y_pred, _ = self.evaluation.evaluation_inputs(run_id)
        current = y_pred.copy()
        policy = self.evaluation.macro_policy()
        calls = {"made": 0, "reused": 0}
        entries = []
        for label in wanted:
            lp = self.prompts.pending_prompt(label)
            ev = self.evaluate_edit(run_id, lp, base_ps=base_ps, inputs=(y_true, y_pred))
            for key in ("made", "reused"):
                calls[key] += ev.calls[key]
            values = pd.Series(ev.values, dtype=float)
            current.loc[values.index, label] = values
            entries.append(
                {
                    "label": label,
                    "parts": ev.parts,
                    "offered": ev.offered,
                    "why": ev.why,
                    "diff": _yaml_diff(base_ps.label(label), lp).replace("(proposed)", "(draft)"),
                }
            )
        current = derive_frame(self.vocab, current)[current.columns]
        same = _same_labels(y_true, [y_pred, current], parts, policy)  # before and after alike
        return DraftsEvaluation(
            run=run_id,
            base_commit=run.prompt_commit,
            head=self.prompts.prompt_commit(),
            labels=entries,
            calls=calls,
            zero_division=policy,
            before=_macro_by_part(y_true, y_pred, parts, policy, left_out=same),
            after=_macro_by_part(y_true, current, parts, policy, left_out=same),
        )

    def proposals(self, label: str | None = None, status: str | None = None) -> pd.DataFrame:
        """Stored proposals, newest first."""
        with self.session() as s:
            return q.proposals_frame(s, self.prompts.asked_label(label) if label else None, status)

    def proposal(self, proposal_id: int) -> StoredProposal:
        """One stored proposal with its edit and evaluation."""
        with self.session() as s:
            row = q.get_proposal(s, proposal_id)
        if row is None:
            raise StudyError(f"no proposal {proposal_id}")
        evaluation = json.loads(row.evaluation_json or "{}")
        evaluation.pop("values", None)
        evaluation.pop("evidence", None)
        return StoredProposal(
            id=proposal_id,
            label=row.label,
            author=row.author,
            source=row.source,
            status=row.status,
            base_commit=row.base_commit,
            run=row.run_id,
            edit=json.loads(row.edit_json or "{}"),
            evaluation=evaluation,
            note_ids=json.loads(row.note_ids_json or "[]"),
            commit=row.commit,
        )

    def accept_proposal(self, proposal_id: int) -> LabelPrompt:
        """Turn an offered proposal into this user's draft (never a commit by itself)."""
        self.require("edit_prompts")
        p = self.proposal(proposal_id)
        if p.status != "offered":
            raise StudyError(
                f"proposal {proposal_id} is {p.status}: only a proposal that does not make validation "
                "worse can be accepted"
            )
        _, _, exists = self.prompts.draft(p.label)
        if exists:
            raise StudyError(f"you already have a draft of {p.label}: save or discard it first")
        base = self.prompts.label_prompt(p.label, p.base_commit)
        lp = proposals.apply_edit(base, p.edit["fields"])
        found = self.prompts.new_contradictions(base, lp)
        if found:
            raise StudyError(
                f"proposal {proposal_id} would make {p.label}'s prompt contradict itself, so an LLM could not "
                "follow it: " + "; ".join(f"[{f.kind}] {f.message}" for f in found)
            )
        self.prompts.save_draft(lp, p.base_commit)
        with self.session() as s:
            q.update_proposal(s, proposal_id, status="accepted")
            q.add_audit(
                s,
                self.actor.user,
                "accept",
                "proposal",
                str(proposal_id),
                None,
                {"label": p.label, "source": p.source, "notes": p.note_ids},
            )
        return lp

    # ------------------------------------------------------------ optimise rounds

    def optimise(
        self,
        labels: list[str] | None = None,
        rounds: int = 3,
        run_id: int | None = None,
        proposer: str = "auto",
        model: str | None = None,
        on_progress=None,
        save_drafts: bool = True,
        api_base: str | None = None,
        phrase_list=None,
        screen: bool = True,
    ) -> OptimiseReport:
        """suggest -> evaluate -> keep if validation does not drop, for K rounds; a report per round; the
        best version is left as drafts for a person to save. A label whose proposal validation rejected
        gets a smaller, safer one in the next round (the offline proposer; a model is asked again).
        screen: first label each proposal on a small stratified part of tuning (core/screening.py); one that
        passes is asked on the whole validation part, which alone decides as without the screen. The rest of
        tuning is not asked: the answers before are carried over (tuning figures and the next round's
        material are then estimates, and the report says how many), and a run of the saved version or
        evaluate-drafts asks them. screen=False: every proposal labelled on all of tuning and validation."""
        self.require("edit_prompts")
        if rounds < 1:
            raise StudyError("rounds must be at least 1")
        run_id = run_id if run_id is not None else self._latest_dev_run_id()
        run = self.runs.run_info(run_id)
        labels = [self.prompts.asked_label(lab) for lab in labels] if labels else list(self.vocab.asked_ids)
        self._require_run_covers(run, labels, "optimise")
        started = time.perf_counter()
        base_ps = self.prompts.prompt_set(run.prompt_commit)
        y_true, y_pred, _ = self.evaluation.evaluation_inputs(run_id)
        parts = self.splits.split_parts(self.study.cohort_name(run.cohort_id))
        preds = self.runs.predictions(run_id)
        evidence = {lab: preds[preds["label"] == lab].set_index("report_id")["evidence"] for lab in labels}
        policy = self.evaluation.macro_policy()
        noise_rate = self._screen_noise_rate(run_id) if screen else 0.0
        phrases = self.phrase_lists(phrase_list)
        # how the reference treats hedges, from every label's tuning part (offline proposer only)
        hedges = None if self._uses_model(proposer, model) else self._run_hedge_convention(run)
        o = _Optimising(
            run=run,
            run_id=run_id,
            y_true=y_true,
            y_pred=y_pred,
            parts=parts,
            screen=screen,
            noise_rate=noise_rate,
            ask={"proposer": proposer, "model": model, "api_base": api_base, "phrases": phrases, "hedges": hedges},
            zero_division=policy,
            calls={"made": 0, "reused": 0, "cost": 0.0, "proposer": 0},
            screen_counts=_no_screen_counts(screen),
            ps=base_ps,
            current=y_pred.copy(),
            evidence=evidence,
            progress=OptimiseProgress(rounds, len(labels), on_progress),
        )
        snapshots, entries = [], []
        for k in range(1, rounds + 1):
            entry: dict[str, Any] = {"round": k, "changes": [], "rejected": []}
            previous = o.current.copy()
            for i, label in enumerate(labels, 1):
                o.progress.turn(k, i, label)
                self._optimise_label(o, entry, k, label)
                o.progress.turn_done()
            snapshots.append(o.current.copy())  # its macro figures come at the end, over the labels of all
            entry["carried"] = sum(len(c) for c in o.carried.values())  # tuning answers not asked: its figures estimate
            entry["validation_mcnemar"] = _mcnemar_table(y_true, previous, o.current, parts, labels)
            entries.append(entry)
            retry = any(
                r.get("status") in ("validation worse", "already rejected", "inconsistent") for r in entry["rejected"]
            )
            if not entry["changes"] and not retry:
                break  # nothing more to propose: later rounds would see the same material
        ps = o.ps
        o.screen_counts["deferred"] = {lab: len(c) for lab, c in o.carried.items() if c}
        changed = [lab for lab in labels if ps.label(lab) != base_ps.label(lab)]
        o.screen_counts["left_calls"] = self._left_to_ask(run, ps, changed)
        # every macro figure covers all the run's labels (not only those optimised), under the study's policy, and
        # the same labels at the start, after each round and at the end (a label undefined in one is left out of all)
        same = _same_labels(y_true, [y_pred, *snapshots], parts, policy)
        for entry, snapshot in zip(entries, snapshots, strict=True):
            entry["metrics"] = _macro_by_part(y_true, snapshot, parts, policy, left_out=same)
        mine = set(self.prompts.drafts()["label"]) if save_drafts else set()
        report = OptimiseReport(
            id=0,  # given when stored
            run=run_id,
            base_commit=run.prompt_commit,
            labels=labels,
            proposer=proposer,
            rounds=entries,
            calls=o.calls,
            screen=o.screen_counts,
            zero_division=policy,
            start=_macro_by_part(y_true, y_pred, parts, policy, left_out=same),
            end=_macro_by_part(y_true, o.current, parts, policy, left_out=same),
            seconds=round(time.perf_counter() - started, 2),
            drafts=[lab for lab in changed if save_drafts and lab not in mine],
            not_drafted=[lab for lab in changed if lab in mine],  # never overwrite a person's own draft
            final_prompts={lab: dump_label_prompt(ps.label(lab)) for lab in changed},
        )
        return self._record_optimisation(report, base_ps, ps)

    def _optimise_label(self, o: _Optimising, entry: dict, k: int, label: str) -> None:
        """One label's turn in round k: propose, screen, decide on validation, keep or refuse (recorded in o and entry)."""
        cases, notes = self._tuning_material(o.run, label, o.current[label], o.evidence[label], (o.y_true, o.y_pred))
        result = self._propose(
            o.ps,
            label,
            cases,
            notes,
            o.ask["proposer"],
            o.ask["model"],
            o.ask["api_base"],
            level=o.refusals.get(label, 0),
            phrases=o.ask["phrases"],
            hedges=o.ask["hedges"],
            avoid=frozenset(o.rejected),
        )
        o.calls["proposer"] += result.calls_made
        edit = result.edit if result.status == "ok" else None
        if edit is None:  # a model's unusable reply is kept in the report, to be read
            entry["rejected"].append(
                {"label": label, "status": result.status, "detail": result.detail, "reply": result.reply}
            )
            return
        new_lp = proposals.apply_edit(o.ps.label(label), edit.fields)
        contradictions = self._contradictions(o.ps, result)
        if contradictions:  # refused before any call: an LLM could not follow the prompt it would make
            entry["rejected"].append(
                {
                    "label": label,
                    "status": "inconsistent",
                    "detail": contradictions,
                    "changes": list(edit.changes),
                }
            )
            o.refuse(label, new_lp, f"inconsistent in round {k}: {contradictions}")
            return
        if new_lp in o.rejected:  # the same material gives the same proposal: do not pay to evaluate it again
            entry["rejected"].append({"label": label, "status": "already rejected", "detail": o.rejected[new_lp]})
            o.refusals[label] = o.refusals.get(label, 0) + 1
            return
        screened = self._screen_in_optimise(o, label, new_lp) if o.screen else None
        if screened is not None and not screened["verdict"]["passed"]:
            o.screen_counts["screened_out"] += 1
            entry["rejected"].append(
                {
                    "label": label,
                    "status": "screened out",
                    "detail": screened["why"],
                    "changes": list(edit.changes),
                    "screen": screened["verdict"],
                }
            )
            o.refuse(label, new_lp, f"screened out in round {k}: {screened['why']}")
            return
        # after a screen, only validation (which alone decides) is asked beyond it; the rest of tuning is
        # carried over and left for a run of the saved version (or evaluate-drafts) to ask
        ev = self.evaluate_edit(
            o.run_id,
            new_lp,
            base_ps=o.ps,
            base_pred=o.current[label],
            inputs=(o.y_true, o.y_pred),
            tuning_ids=screened["ids"] if screened else None,
            on_calls=o.progress.calls("asking validation" + ("" if screened else " and tuning")),
        )
        o.add_calls(ev.calls, "full_calls")
        summary = _change_summary(label, edit, ev, screened)
        if not ev.offered:
            entry["rejected"].append({**summary, "status": "validation worse", "detail": ev.why})
            o.refuse(label, new_lp, f"rejected in round {k}: {ev.why}")
            return
        o.ps = o.ps.with_label(new_lp)
        o.current = _take_answers(
            self.vocab,
            o.current,
            o.evidence,
            label,
            pd.Series(ev.values, dtype=float),
            pd.Series(ev.evidence, dtype=object),
        )
        o.carried[label] = set(ev.carried)
        entry["changes"].append(summary)

    def _screen_in_optimise(self, o: _Optimising, label: str, new_lp: LabelPrompt) -> dict:
        """Screen a proposal; the real answers of the current prompt it asked replace carried-over ones in o."""
        screened = self._screen_edit(
            o.run,
            new_lp,
            o.ps,
            o.current[label],
            o.y_true,
            o.parts,
            o.noise_rate,
            carried=o.carried.get(label, set()),
            on_calls=o.progress.calls("screening the proposal on part of tuning"),
            zero_division=o.zero_division,
        )
        o.add_calls(screened["calls"], "calls", screened["refresh_calls"])
        fresh = screened["refreshed"]
        o.current = _take_answers(self.vocab, o.current, o.evidence, label, fresh["value"], fresh["evidence"])
        o.carried[label] = o.carried.get(label, set()) - set(fresh.index)
        return screened

    def _record_optimisation(self, report: OptimiseReport, base_ps: PromptSet, ps: PromptSet) -> OptimiseReport:
        """Store an optimise report (given its id) with an accepted proposal per draft (the saved version's commit
        cites it), audit it, and leave its drafts as drafts (the report has left out a person's own draft)."""
        notes = {
            lab: sorted({n for e in report.rounds for c in e["changes"] if c["label"] == lab for n in c["note_ids"]})
            for lab in report.drafts
        }
        stored = {k: v for k, v in report.to_dict().items() if k != "id"}  # the id is the row's
        with self.session() as s:
            report = dataclasses.replace(
                report, id=q.add_optimisation(s, self.actor.user, report.run, json.dumps(stored, default=json_default))
            )
            for lab in report.drafts:  # an accepted proposal per draft: the saved version's message cites it
                edit = proposals.Edit(
                    lab,
                    proposals.edit_fields(base_ps.label(lab), ps.label(lab)),
                    f"optimise report #{report.id}",
                    f"optimise (report #{report.id})",
                    tuple(notes[lab]),
                    proposals.describe(base_ps.label(lab), ps.label(lab)),
                )
                q.add_proposal(
                    s,
                    label=lab,
                    author=self.actor.user,
                    source=edit.source,
                    status="accepted",
                    base_commit=report.base_commit,
                    run_id=report.run,
                    edit_json=json.dumps(edit.to_dict()),
                    note_ids_json=json.dumps(list(edit.note_ids)),
                )
            q.add_audit(
                s,
                self.actor.user,
                "optimise",
                "prompt",
                ",".join(report.labels),
                None,
                {"report": report.id, "rounds": len(report.rounds), "drafts": report.drafts},
            )
        for lab in report.drafts:
            self.prompts.save_draft(ps.label(lab), report.base_commit)
        return report

    def _left_to_ask(self, run, ps, labels: list[str]) -> dict[str, int]:
        """Per changed label, the calls a run of prompt set ps on the run's cohort would still make after the call
        cache (counted, none made): what optimise left unasked (joint mode: one figure for the joint calls)."""
        if not labels:
            return {}
        cfg = labelling.model_config(self.runs.settings_from_params(json.loads(run.params_json)))
        with self.session() as s:
            reports = q.reports_frame(s, cohort_id=run.cohort_id)
        groups = (
            {lab: [lab] for lab in labels} if run.mode == "per_label" else {"joint calls": json.loads(run.labels_json)}
        )
        left = {}
        for name, group in groups.items():
            requests = self.runs.build_requests(ps, reports, group, run.mode, run.sections.split(","), cfg, set())
            with self.session() as s:
                cached = set(q.cached_calls(s, [r.key for r in requests]))
            left[name] = sum(r.key not in cached for r in requests)
        return left

    def _screen_noise_rate(self, run_id: int) -> float:
        """The upper end of the run's measured overall noise rate (0 when not measured: the offline labeller's is 0)."""
        rates = self.costs.noise_rates([run_id])
        overall = rates[rates["label"] == "all"]
        return float(overall["hi"].iloc[0]) if len(overall) else 0.0

    def _screen_edit(
        self,
        run,
        new_lp: LabelPrompt,
        base_ps,
        before: pd.Series,
        y_true: pd.DataFrame,
        parts: dict,
        noise_rate: float = 0.0,
        seed: int = 0,
        carried=frozenset(),
        on_calls=None,
        zero_division: str = "undefined",
    ) -> dict:
        """Label one proposal on its screen (the label's tuning disagreements and a stratified, seeded sample of
        agreements) through the call cache, and judge whether it is worth asking validation.

        carried: tuning reports whose answer under the current prompt was never asked (an earlier kept change
        carried it over); those the screen picks are asked under the current prompt first, so fixed and
        broken compare two real answers. What they answer comes back as refreshed. zero_division: the study's
        policy, under which the screen estimates the label's F1 on tuning (it must rise to pass)."""
        label = new_lp.label
        new_ps = base_ps.with_label(new_lp)
        leaked = new_ps.example_report_ids() | base_ps.example_report_ids()
        known = y_true[label].notna() & before.reindex(y_true.index).notna()
        ids = [r for r in y_true.index if parts.get(r) == "tuning" and r not in leaked and known.loc[r]]
        chosen = screening.screen_sample(y_true.loc[ids, label], before.reindex(ids), seed)
        counts = _no_calls()
        refresh = [r for r in chosen.ids if r in carried]
        refreshed = pd.DataFrame(columns=["value", "evidence"])
        if refresh:
            refreshed, refresh_counts = self._label_with(run, base_ps, label, refresh, on_calls=on_calls)
            refreshed = refreshed[refreshed["value"].notna()]  # a failed call keeps the answer carried over
            _sum_calls(counts, refresh_counts)
            before = before.copy()
            before.loc[refreshed.index] = refreshed["value"].astype(float)
        refresh_made = counts["made"]
        # first the reports the change can fix; the agreements (which it can only break) only when the proposal
        # could still pass with none of them broken: a sequential screen, the same verdict for fewer calls
        first = screening.fixable(chosen, y_true[label], before)
        after, screen_counts = self._label_with(run, new_ps, label, first, on_calls=on_calls)
        _sum_calls(counts, screen_counts)
        verdict = screening.screen_verdict(
            chosen, y_true[label], before, after["value"].astype(float), noise_rate, zero_division, asked=first
        )
        if verdict.passed:
            asked = set(first)
            rest = [r for r in chosen.ids if r not in asked]  # the agreements, which it can only break
            more, more_counts = self._label_with(run, new_ps, label, rest, on_calls=on_calls)
            _sum_calls(counts, more_counts)
            after = pd.concat([after, more]).reindex(chosen.ids)
            verdict = screening.screen_verdict(
                chosen, y_true[label], before, after["value"].astype(float), noise_rate, zero_division
            )
        return {
            "calls": counts,
            "refresh_calls": refresh_made,
            "refreshed": refreshed,
            "ids": chosen.ids if not verdict.stopped else first,
            "verdict": verdict.to_dict(),
            "why": verdict.why(),
        }

    def optimisation_reports(self) -> pd.DataFrame:
        """Stored optimisation reports, newest first."""
        with self.session() as s:
            frame = q.optimisations_frame(s)
        frame["report"] = [
            OptimiseReport.from_stored(int(i), json.loads(text))
            for i, text in zip(frame["id"], frame.pop("report_json"), strict=True)
        ]
        return frame


# ---------------------------------------------------------------- helpers (pure)


def _change_summary(label: str, edit, ev, screened: dict | None) -> dict:
    """One evaluated change as the optimise report keeps it: the edit, F1 per part, validation's McNemar, calls."""
    return {
        "label": label,
        "changes": list(edit.changes),
        "note_ids": list(edit.note_ids),
        "rationale": edit.rationale,
        "source": edit.source,
        **{f"{p}_f1": [ev.parts[p]["f1_before"], ev.parts[p]["f1_after"]] for p in splits.PARTS},
        "validation_mcnemar": {k: ev.parts["validation"][k] for k in ("fixed", "broken", "p_value", "verdict")},
        "tuning_carried": ev.parts["tuning"].get("carried", 0),  # tuning answers not asked: tuning F1 estimates
        "calls_made": ev.calls["made"] + (screened["calls"]["made"] if screened else 0),
        "calls_by_part": {"screen": screened["calls"]["made"] if screened else 0, **ev.calls["by_part"]},
        **({"screen": screened["verdict"]} if screened else {}),
    }


def _no_calls() -> dict:
    """Call counts of a labelling that asked nothing (see _sum_calls)."""
    return {"calls": 0, "made": 0, "reused": 0, "cost": 0.0, "prompt_tokens": 0, "completion_tokens": 0}


def _sum_calls(total: dict, counts: dict) -> dict:
    """Add one labelling's call counts to total."""
    for key in ("calls", "made", "reused", "prompt_tokens", "completion_tokens"):
        total[key] += counts.get(key) or 0
    total["cost"] += counts.get("cost") or 0.0
    return total


def _no_screen_counts(on: bool) -> dict[str, Any]:
    """An optimise report's screening figures before any proposal (on: whether proposals are screened)."""
    return {
        "on": on,
        "screened": 0,
        "screened_out": 0,
        "calls": 0,
        "refresh_calls": 0,
        "full_calls": 0,
        "full_by_part": {part: 0 for part in splits.PARTS},
        "deferred": {},
    }


class _ProposerReply:
    """How the model proposer reads a reply (labelling.label_calls' decide): a strict edit, or why there is none;
    what it read (the reply and the proposal) stays here for the caller."""

    def __init__(self, lp: LabelPrompt, allowed: set[str], source: str) -> None:
        self.lp, self.allowed, self.source = lp, allowed, source
        self.result: proposals.ProposalResult | None = None
        self.text = ""

    def __call__(self, req, text: str | None, res=None, replies=None) -> dict:
        """label -> Answer: a value only for a usable edit, so only that reply is cached."""
        self.text = text or ""
        shape = labelling.reply_shape_failure(res)
        if text is None:
            self.result = proposals.ProposalResult("call_error", ((res.error if res else None) or "no reply")[:2000])
        elif shape is not None:  # cut off at max_tokens, or declined by the provider
            self.result = proposals.ProposalResult(shape.status, shape.detail)
        else:
            self.result = proposals.parse_reply(text, self.lp, self.allowed, self.source)
        ok = self.result.status == "ok"
        return {
            self.lp.label: parsing.Answer(1 if ok else None, "", "ok" if ok else self.result.status, self.result.detail)
        }


class OptimiseProgress:
    """What optimise is doing, for a person waiting (as a run's bar): the round, the label and its step, the calls
    of that step so far, the time spent and an estimate of the time left (from the turns done so far, counting
    every round: optimise stops early when a round keeps nothing and has nothing to retry)."""

    def __init__(self, rounds: int, n_labels: int, emit=None) -> None:
        self.rounds, self.n_labels, self.emit = rounds, n_labels, emit
        self.started = time.monotonic()
        self.turns = 0
        self.where = ""

    def turn(self, k: int, i: int, label: str) -> None:
        """A label's turn in round k begins: its proposal is asked for."""
        self.where = f"round {k} of {self.rounds}, label {i} of {self.n_labels} ({label})"
        self.say("proposing a revision")

    def turn_done(self) -> None:
        """A label's turn ended (kept or turned down)."""
        self.turns += 1

    def calls(self, step: str):
        """A labelling progress callback (labelling.Progress) for one step of the current turn."""
        return lambda p: self.say(f"{step}: {p.done:,} of {p.total:,} calls ({p.made:,} made, {p.reused:,} cached)")

    def say(self, what: str) -> None:
        """One progress line: where, what, and the time."""
        if self.emit:
            self.emit(f"{self.where}: {what}; {self.timing()}")

    def timing(self) -> str:
        """Time spent, turns done and the time left at the pace so far."""
        spent = time.monotonic() - self.started
        total = self.rounds * self.n_labels
        text = f"{labelling.duration(spent)} spent, {self.turns} of {total} label turns done"
        if self.turns:
            text += (
                f", about {labelling.duration(labelling.at_pace(spent, self.turns, total - self.turns))} left at most"
            )
        return text


@dataclasses.dataclass
class _Optimising:
    """What one optimise call carries from label to label and round to round."""

    run: Run
    run_id: int
    y_true: pd.DataFrame
    y_pred: pd.DataFrame
    parts: dict
    screen: bool
    noise_rate: float
    ask: dict[str, Any]  # how proposals are asked for: proposer, model, api_base, phrases, hedges
    zero_division: str  # the study's macro policy
    calls: dict[str, float]  # the report's call counts, added up here: made, reused, cost, proposer
    screen_counts: dict[str, Any]  # and its screening figures (_no_screen_counts)
    ps: PromptSet  # the prompt set with every change kept so far
    current: pd.DataFrame  # the answers under ps (carried-over ones where a screen left tuning unasked)
    evidence: dict
    progress: OptimiseProgress
    rejected: dict[LabelPrompt, str] = dataclasses.field(default_factory=dict)  # proposal -> why it was turned down
    carried: dict[str, set[str]] = dataclasses.field(default_factory=dict)  # label -> tuning reports not asked
    refusals: dict[str, int] = dataclasses.field(default_factory=dict)  # label -> its proposals turned down so far

    def refuse(self, label: str, proposal, why: str) -> None:
        """Record a proposal turned down (the next one for its label is made smaller, the same one never paid again)."""
        self.rejected[proposal] = why
        self.refusals[label] = self.refusals.get(label, 0) + 1

    def add_calls(self, counts: dict, kind: str, refresh: int = 0) -> None:
        """Add one labelling's call counts to the report's (kind: the screen's "calls" or the evaluations'
        "full_calls"; refresh: the screen's calls that asked carried-over answers under the current prompt)."""
        for key in ("made", "reused"):
            self.calls[key] += counts[key]
        self.calls["cost"] += counts.get("cost") or 0.0
        self.screen_counts[kind] += counts["made"]
        if kind == "calls":
            self.screen_counts["screened"] += 1
            self.screen_counts["refresh_calls"] += refresh
        else:
            for part, made in counts["by_part"].items():
                self.screen_counts["full_by_part"][part] += made


def _take_answers(
    vocab, current: pd.DataFrame, evidence: dict, label: str, values: pd.Series, found: pd.Series
) -> pd.DataFrame:
    """current with label's answers on values' reports replaced (No Finding derived again); evidence updated in place."""
    if values.empty:
        return current
    current = current.copy()
    current.loc[values.index, label] = values.astype(float)
    evidence[label] = pd.concat([evidence[label].drop(found.index, errors="ignore"), found])
    return derive_frame(vocab, current)[current.columns]  # No Finding follows the asked labels


def _part_metrics(y_true, y_pred, ids, ci, n_resamples, zero_division) -> PartMetrics:
    """Per-label table and macro F1 with a bootstrap interval on some reports."""
    t, p = y_true.loc[ids], y_pred.loc[ids]
    table = metrics.label_metrics(t, p, ci=ci, zero_division=zero_division)
    avg = metrics.averages(table, zero_division=zero_division, ci=ci)
    boot = (
        metrics.bootstrap_macro_f1(t, p, n_resamples=n_resamples, zero_division=zero_division)
        if n_resamples and len(ids)
        else {}
    )
    if n_resamples and len(ids):
        table = table.join(metrics.bootstrap_label_f1(t, p, n_resamples=n_resamples))
    return PartMetrics(
        reports=len(ids),
        table=table,
        macro_f1=avg["macro_f1"],
        macro_f1_lo=boot.get("lo"),
        macro_f1_hi=boot.get("hi"),
        averages=avg,
        macro_labels=avg["macro_f1_labels"],
    )


def _macro_by_part(
    y_true, y_pred, parts, zero_division: str, n_resamples: int = 1000, left_out: frozenset = frozenset()
) -> dict:
    """Macro F1 under the study's policy with a bootstrap interval, per part, over every label of the run
    (the same figure split-metrics shows for a run of these predictions). left_out: labels to leave out of
    every part's mean as well (undefined in a figure compared: see _same_labels), so tuning and validation,
    and before and after, average the same labels; the figure names them."""
    left_out = left_out | _same_labels(y_true, [y_pred], parts, zero_division)
    out: dict[str, Any] = {}
    for part in splits.PARTS:
        ids = [r for r in y_true.index if parts.get(r) == part]
        t, p = y_true.loc[ids], y_pred.loc[ids, y_true.columns]
        table = metrics.label_metrics(t, p, zero_division=zero_division)
        undefined = table["f1_undefined"].astype(bool) | table.index.isin(list(left_out))
        figure = metrics.macro_figure(table["f1"], undefined, zero_division, paired=bool(left_out))
        kept = [lab for lab in t.columns if lab not in set(figure.left_out)]
        boot = metrics.bootstrap_macro_f1(t[kept], p[kept], n_resamples=n_resamples, zero_division=zero_division)
        out[part] = {
            "macro_f1": metrics.finite(figure.value),
            "lo": metrics.finite(boot.get("lo", np.nan)),
            "labels": figure.describe(),
            "hi": metrics.finite(boot.get("hi", np.nan)),
            "per_label": {k: metrics.finite(v) for k, v in table["f1"].items()},
        }
    tuning, validation = out["tuning"]["macro_f1"], out["validation"]["macro_f1"]
    out["gap"] = None if tuning is None or validation is None else metrics.finite(tuning - validation)
    return out


def _same_labels(y_true, predictions: list, parts, zero_division: str) -> frozenset:
    """Labels undefined (no positive on either side) on some part under some of the predictions compared, when
    the policy leaves such a label out: left out of every figure compared, so each averages the same labels."""
    tables = []
    for y_pred in predictions:
        for part in splits.PARTS:
            ids = [r for r in y_true.index if parts.get(r) == part]
            tables.append(
                metrics.label_metrics(y_true.loc[ids], y_pred.loc[ids, y_true.columns], zero_division=zero_division)
            )
    return metrics.undefined_labels(tables, zero_division)


def _mcnemar_table(y_true, before, after, parts, labels) -> list[dict]:
    """Per changed label on validation: fixed, broken, exact McNemar p, Holm-adjusted p and verdict."""
    ids = [r for r in y_true.index if parts.get(r) == "validation"]
    changed = [lab for lab in labels if not before.loc[ids, lab].equals(after.loc[ids, lab])]
    if not changed:
        return []
    table = metrics.compare_labels(y_true.loc[ids, changed], before.loc[ids, changed], after.loc[ids, changed])
    return [
        {
            "label": lab,
            "fixed": int(r.c),
            "broken": int(r.b),
            "p_value": metrics.finite(r.p_value),
            "p_holm": metrics.finite(r.p_holm),
            "verdict": r.verdict,
            "f1_before": metrics.finite(r.f1_a),
            "f1_after": metrics.finite(r.f1_b),
        }
        for lab, r in zip(table.index, table.itertuples(index=False), strict=False)
    ]


def _compare_part(y_true: pd.DataFrame, before: pd.DataFrame, after: pd.DataFrame) -> dict:
    """F1 before and after, fixed and broken cases and the exact McNemar verdict for one label on one part."""
    table = metrics.compare_labels(y_true, before, after)
    row = table.iloc[0]
    cases = metrics.fixed_and_broken(y_true, before, after)
    return {
        "reports": int(row["n"]),
        "f1_before": metrics.finite(row["f1_a"]),
        "f1_after": metrics.finite(row["f1_b"]),
        "delta_f1": metrics.finite(row["delta_f1"]) if not pd.isna(row["delta_f1"]) else float("nan"),
        "fixed": int(row["c"]),
        "broken": int(row["b"]),
        "p_value": metrics.finite(row["p_value"]),
        "verdict": row["verdict"],
        "fixed_cases": cases.loc[cases["change"] == "fixed", "report"].tolist(),
        "broken_cases": cases.loc[cases["change"] == "broken", "report"].tolist(),
    }


def _yaml_diff(old: LabelPrompt, new: LabelPrompt) -> str:
    """Unified diff of the label's YAML."""
    a, b = label_yaml(old), label_yaml(new)
    return "".join(
        difflib.unified_diff(
            a.splitlines(True), b.splitlines(True), fromfile=f"{old.label}.yaml", tofile=f"{new.label}.yaml (proposed)"
        )
    )


def _proposer_messages(
    lp: LabelPrompt, name: str, failing: pd.DataFrame, notes: pd.DataFrame, attribute_cases: pd.DataFrame | None = None
) -> list[dict]:
    """The reflective proposer's messages: current prompt, failing tuning cases with answers and notes, and
    the matched findings whose attributes differ (with their notes)."""

    def note_lines(report_id: str) -> str:
        mine = notes[notes["report_id"] == report_id]
        lines = [
            f"  - note #{int(n.id)} [{n.category}; {n.significance}] {n.text}" for n in mine.itertuples(index=False)
        ]
        return "\n" + "\n".join(lines) if lines else ""

    parts = [f"Label: {name} ({lp.label})", "Current prompt (YAML):", label_yaml(lp), "Failing tuning cases:"]
    for row in failing.itertuples(index=False):
        kind = (
            "missed finding (labeller said 0, reference 1)"
            if row.reference == 1
            else "false finding (labeller said 1, reference 0)"
        )
        parts.append(
            f"Case {row.report_id}: {kind}\n  report: {row.text[:MAX_CASE_CHARS]}\n"
            f"  labeller's evidence: {row.evidence or '(none)'}" + note_lines(row.report_id)
        )
    if attribute_cases is not None and len(attribute_cases):
        parts.append(
            "Tuning cases where the finding is rightly found but an attribute the labeller gave differs from "
            "the reference's (guidance in the definition can say how this label's side, severity or change "
            "is read):"
        )
        for row in attribute_cases.itertuples(index=False):
            parts.append(
                f"Case {row.report_id}: attribute differs ({row.detail})\n  report: {row.text[:MAX_CASE_CHARS]}"
                + note_lines(row.report_id)
            )
    parts.append('Reply with one JSON object: {"edit": {...fields you change...}, "rationale": "..."}')
    return [{"role": "system", "content": PROPOSER_SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


def fmt_figure(value) -> str:
    """A figure for text output ("n/a" when undefined)."""
    return "n/a" if pd.isna(value) else f"{value:.3f}"


def suggestion_text(result: Suggestion) -> str:
    """A suggestion as text for a terminal: status, changes, evaluation per part, diff."""
    head = f"proposal #{result.proposal} for {result.label} (run {result.run}): {result.proposal_status}"
    edit, ev = result.edit, result.evaluation
    if result.status != "ok" or edit is None or ev is None:
        reply = f"\nthe proposer replied: {reply_excerpt(result.reply)}" if result.reply else ""
        return f"{head}\n{result.status}: {result.detail}{reply}"
    lines = [head, f"proposer: {edit['source']}", "changes:"] + [f"  {c}" for c in edit["changes"]]
    if edit["note_ids"]:
        lines.append("from error notes: " + ", ".join(f"#{n}" for n in edit["note_ids"]))
    if edit["rationale"]:
        lines.append(f"rationale: {edit['rationale']}")
    for part, m in ev["parts"].items():
        lines.append(
            f"{part}: F1 {fmt_figure(m['f1_before'])} -> {fmt_figure(m['f1_after'])} on {m['reports']} reports; fixed "
            f"{m['fixed']} ({', '.join(m['fixed_cases'][:10])}), broken {m['broken']} ({', '.join(m['broken_cases'][:10])})"
            + (f"; McNemar p = {fmt_figure(m['p_value'])}, {m['verdict']}" if part == "validation" else "")
        )
    c = ev["calls"]
    lines.append(f"calls: {c['made']} made, {c['reused']} reused from the cache")
    lines.append(ev["why"] + (f"; accept with: workbench accept {result.proposal}" if result.offered else ""))
    lines.append(result.diff)
    return "\n".join(lines)


def drafts_text(result: DraftsEvaluation) -> str:
    """evaluate-drafts as text: per draft F1 before -> after on each part with fixed/broken cases, then macro F1."""
    lines = [
        f"drafts against run {result.run} (version {result.base_commit[:8]}), labelled through the call cache; "
        "nothing is committed"
    ]
    if result.head != result.base_commit:
        lines.append(
            f"note: run {result.run} used version {result.base_commit[:8]}, the latest is {result.head[:8]}: "
            "run the latest version first for a comparison with it"
        )
    for entry in result.labels:
        lines.append(f"\n{entry['label']}: {entry['why']}")
        for part, m in entry["parts"].items():
            lines.append(
                f"  {part}: F1 {fmt_figure(m['f1_before'])} -> {fmt_figure(m['f1_after'])} on {m['reports']} reports; "
                f"fixed {m['fixed']}, broken {m['broken']}"
                + (f"; McNemar p = {fmt_figure(m['p_value'])}, {m['verdict']}" if part == "validation" else "")
            )
    for part in splits.PARTS:
        b, a = result.before[part], result.after[part]
        lines.append(
            f"{'' if part != 'tuning' else chr(10)}{part}: macro F1 {fmt_figure(b['macro_f1'])} -> "
            f"{fmt_figure(a['macro_f1'])} ({a['labels']})"
        )
    c = result.calls
    lines.append(
        f"calls: {c['made']} made, {c['reused']} reused from the cache; save with `workbench prompts save "
        f"{' '.join(e['label'] for e in result.labels)} -m MESSAGE`"
    )
    return "\n".join(lines)


def report_markdown(report: OptimiseReport) -> str:
    """An optimisation report as Markdown: per round what changed, tuning and validation F1, McNemar on validation."""

    def macro(m: dict) -> str:
        return (
            f"tuning {fmt_figure(m['tuning']['macro_f1'])} [{fmt_figure(m['tuning']['lo'])}, {fmt_figure(m['tuning']['hi'])}], validation "
            f"{fmt_figure(m['validation']['macro_f1'])} [{fmt_figure(m['validation']['lo'])}, {fmt_figure(m['validation']['hi'])}], gap {fmt_figure(m['gap'])}"
        )

    start = report.start
    covers = start["validation"].get("labels") or f"zero_division: {report.zero_division}"
    lines = [
        f"# Optimisation report #{report.id} (run {report.run}, version {report.base_commit[:8]})",
        "",
        f"Macro F1 ({covers}; bootstrap 95% intervals) at the start: {macro(start)}",
        "",
    ]
    for entry in report.rounds:
        lines.append(f"## Round {entry['round']}")
        for ch in entry["changes"]:
            estimate = (
                f" (estimated, {ch['tuning_carried']:,} answers carried over)" if ch.get("tuning_carried") else ""
            )
            lines.append(
                f"- **{ch['label']}** ({ch['source']}): tuning F1 {fmt_figure(ch['tuning_f1'][0])} -> "
                f"{fmt_figure(ch['tuning_f1'][1])}{estimate}, "
                f"validation F1 {fmt_figure(ch['validation_f1'][0])} -> {fmt_figure(ch['validation_f1'][1])}; McNemar on validation: "
                f"fixed {ch['validation_mcnemar']['fixed']}, broken {ch['validation_mcnemar']['broken']}, "
                f"p = {fmt_figure(ch['validation_mcnemar']['p_value'])} ({ch['validation_mcnemar']['verdict']})"
            )
            lines += [f"    - {c}" for c in ch["changes"]]
            if ch["note_ids"]:
                lines.append("    - from error notes " + ", ".join(f"#{n}" for n in ch["note_ids"]))
        for r in entry["rejected"]:
            if r.get("status") == "validation worse":
                lines.append(
                    f"- {r['label']}: not kept, validation F1 {fmt_figure(r['validation_f1'][0])} -> {fmt_figure(r['validation_f1'][1])}"
                )
            elif r.get("status") == "screened out":
                lines.append(f"- {r['label']}: screened out, validation not asked ({r['detail']})")
            elif r.get("status") == "already rejected":
                lines.append(f"- {r['label']}: the same proposal again ({r['detail']}); not evaluated again")
            else:
                lines.append(rejected_line(r))
        if not entry["changes"]:
            lines.append("- no change kept")
        lines.append(f"\nAfter round {entry['round']}: {macro(entry['metrics'])}{carried_note(entry)}\n")
    lines.append(f"At the end: {macro(report.end)}{carried_note(report.rounds[-1] if report.rounds else {})}")
    calls = report.calls
    proposer = f" (plus {calls['proposer']:,} calls to the model proposer)" if calls.get("proposer") else ""
    lines.append(
        f"\nCalls made {calls['made']}{proposer}, reused from the cache {calls['reused']}; {report.seconds} s. "
        + (f"Left as drafts (not saved): {', '.join(report.drafts)}." if report.drafts else "No draft left.")
    )
    lines.append(screen_text(report))
    return "\n".join(lines)


def rejected_line(r: dict) -> str:
    """A proposal turned down before any evaluation: an inconsistent one, or no usable proposal (a model
    proposer's malformed, empty or refused reply, shown as it came)."""
    if r["status"] == "inconsistent":
        return f"- {r['label']}: not evaluated, the proposal would make the prompt contradict itself: {r['detail']}"
    line = f"- {r['label']}: no proposal ({r['status']}: {r['detail']})"
    if r.get("reply"):
        line += f"; the proposer replied: {reply_excerpt(r['reply'])}"
    return line


def reply_excerpt(reply: str, limit: int = 300) -> str:
    """A model's reply on one line, cut to limit characters (the whole reply is stored with the report)."""
    flat = " ".join(str(reply).split())
    return repr(flat if len(flat) <= limit else flat[:limit] + " ...")


def carried_note(entry: dict) -> str:
    """What a round's tuning figures rest on when some tuning answers were carried over ("" when none)."""
    n = entry.get("carried") or 0
    return f" (tuning estimated: {n:,} tuning answers carried over from the version before, not asked)" if n else ""


def screen_text(report: OptimiseReport) -> str:
    """The screening figures of an optimise report: calls per kept change, before and after the screen, and the
    tuning answers left for a run of the saved version."""
    scr = report.screen
    kept = sum(len(e["changes"]) for e in report.rounds)
    made = report.calls["made"]
    per = f"{made / kept:,.0f} calls made per kept change ({kept} kept)" if kept else "no change kept"
    by_part = scr.get("full_by_part")
    split = f": tuning {by_part['tuning']:,}, validation {by_part['validation']:,}" if by_part else ""
    refresh = (
        f", {scr['refresh_calls']:,} of them asking the current prompt where an answer was carried over"
        if scr.get("refresh_calls")
        else ""
    )
    text = (
        f"Screening off: every proposal evaluated in full ({made:,} calls{split}); {made:,} calls made, {per}."
        if not scr.get("on")
        else f"Screening: {scr['screened']} proposals screened ({scr['calls']:,} calls{refresh}), {scr['screened_out']} "
        f"screened out, {scr['screened'] - scr['screened_out']} passed ({scr['full_calls']:,} calls more{split}); "
        f"{made:,} calls made in all, {per}."
    )
    deferred, left = scr.get("deferred") or {}, scr.get("left_calls") or {}
    if scr.get("on") and by_part is not None and kept:  # frugal optimise (older reports asked all of tuning)
        text += " Keep or reject was decided on the whole validation part, asked for every proposal that passed."
        if deferred:
            text += (
                f" Not asked: {sum(deferred.values()):,} tuning answers of the changed labels ("
                + ", ".join(f"{lab} {n:,}" for lab, n in deferred.items())
                + "), carried over from the version "
                "before: their tuning figures above are estimates."
            )
    if sum(left.values()):
        text += (
            f" A run of the saved version still makes {sum(left.values()):,} calls after the call cache ("
            + ", ".join(f"{lab} {n:,}" for lab, n in left.items() if n)
            + "); `workbench evaluate-drafts` asks "
            "the tuning and validation ones before anything is saved."
        )
    return text


__all__ = [
    "OptimisingService",
    "COHORT_ROLES",
    "PROPOSERS",
    "suggestion_text",
    "report_markdown",
    "fmt_figure",
    "drafts_text",
    "screen_text",
    "carried_note",
]
