"""Evaluation of runs against the reference: metrics with intervals, comparisons, the iteration
history, the human ceiling, the disagreement queue and the error notes attached to it.

Which cells count is decided here, once, and reported: reports used as few-shot examples in the
evaluated prompt version (leakage), items waiting for adjudication, and failed predictions are
left out, and every output says how many.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from workbench.core import agreement, metrics
from workbench.core.text import compose_text
from workbench.errors import NotFound, UserError
from workbench.labeller import labelling
from workbench.services import memo
from workbench.services.adaptive import agreement_readings
from workbench.services.base import Service, StudyContext
from workbench.services.results import CallFacts, CompareView, Comparison
from workbench.store import prompt_repo
from workbench.store import queries as q
from workbench.study import StudyError

if TYPE_CHECKING:  # collaborators' types, for readers and type checkers only
    from workbench.services.prompting import PromptsService
    from workbench.services.runs import RunsService
    from workbench.services.splits import SplitsService
    from workbench.services.study import StudyService

_FULL_SHA = re.compile(r"[0-9a-f]{40}")  # a commit id, which names content that never changes


@dataclass
class Evaluation:
    """Per-label metrics of one run plus averages, bootstrap and what was left out."""

    run_id: int
    table: pd.DataFrame
    averages: dict
    bootstrap: dict
    excluded: dict
    ci: str
    zero_division: str
    macro: metrics.MacroFigure  # macro F1 under the study's policy, with the labels it averages
    labels: list = field(default_factory=list)

    def paper_table(self, previous: Evaluation | None = None) -> pd.DataFrame:
        """The Ran Score paper's layout: label, accuracy [interval], precision, recall, F1, change in F1."""
        t = self.table
        out = pd.DataFrame(
            {
                "label": t.index,
                "n": t["n"].to_numpy(),
                "support": t["support"].to_numpy(),
                "accuracy [95% CI]": [
                    f"{a:.3f} [{lo:.3f}, {hi:.3f}]" if not pd.isna(a) else "n/a"
                    for a, lo, hi in zip(t["accuracy"], t["accuracy_lo"], t["accuracy_hi"], strict=False)
                ],
                "precision": [_fmt(v, u) for v, u in zip(t["precision"], t["precision_undefined"], strict=False)],
                "recall": [_fmt(v, u) for v, u in zip(t["recall"], t["recall_undefined"], strict=False)],
                "F1": [_fmt(v, u) for v, u in zip(t["f1"], t["f1_undefined"], strict=False)],
                "FP": t["fp"].to_numpy(),
                "FN": t["fn"].to_numpy(),
            }
        )
        if previous is not None:
            prev = previous.table["f1"].reindex(t.index)
            out["change in F1"] = [f"{d:+.3f}" if not pd.isna(d) else "n/a" for d in (t["f1"] - prev)]
        return out


def _plain(value) -> float | None:
    """A figure as a float, None when undefined or absent."""
    return None if pd.isna(value) else float(value)


def _same(a, b) -> bool:
    """Two figures equal, undefined ones included."""
    a, b = _plain(a), _plain(b)
    return a == b or (a is not None and b is not None and abs(a - b) < 1e-12)


def drift_text(drift: list[dict]) -> str:
    """'the reference changed since run 1 was scored (1 adjudication): run 1 macro F1 0.780 -> 0.782 (...)'."""
    if not drift:
        return ""
    first = min(drift, key=lambda d: d["run"])
    what = [f"{first[k]} {k[:-1] if first[k] == 1 else k}" for k in ("adjudications", "readings") if first[k]]
    head = f"the reference changed since run {first['run']} was scored ({', '.join(what)}): figures moved: "

    def fmt(v) -> str:
        return "undefined" if pd.isna(v) else f"{v:.3f}"

    runs = []
    for d in drift:
        labels = ", ".join(f"{lab} {fmt(a)} -> {fmt(b)}" for lab, (a, b) in list(d["labels"].items())[:5])
        more = f" and {len(d['labels']) - 5} more" if len(d["labels"]) > 5 else ""
        runs.append(
            f"run {d['run']} macro F1 {fmt(d['macro_f1'][0])} -> {fmt(d['macro_f1'][1])}"
            + (f" ({labels}{more})" if labels else " (no label's F1 moved)")
        )
    return head + "; ".join(runs)


def refuse_same_run(run_a: int, run_b: int) -> None:
    """A comparison of a run with itself says nothing: refuse it with the fix."""
    if run_a == run_b:
        raise UserError(
            f"run {run_a} compared with itself shows no change: name two different runs of the same cohort "
            "(e.g. the run before a prompt change and the run after it)"
        )


def paired_macro(table: pd.DataFrame, zero_division: str) -> tuple:
    """Macro F1 of run A and run B from a compare_labels table (the one macro rule, on the paired reports), over
    the same labels: one undefined on either side is left out of both when the policy leaves it out."""
    return metrics.paired_macro_figures(
        table["f1_a"], table["f1_a_undefined"], table["f1_b"], table["f1_b_undefined"], zero_division
    )


def _fmt(value: float, undefined: bool) -> str:
    """A metric for a table: undefined values are marked, never shown as a silent 0."""
    if undefined:
        return "undefined*" if pd.isna(value) else f"{value:.3f}*"
    return f"{value:.3f}"


class EvaluationService(Service):
    """Metrics, comparisons, history, ceiling, disagreements, notes."""

    def __init__(
        self, ctx: StudyContext, study: StudyService, splits: SplitsService, runs: RunsService, prompts: PromptsService
    ) -> None:
        super().__init__(ctx)
        self.study = study
        self.splits = splits
        self.runs = runs
        self.prompts = prompts

    # ------------------------------------------------------------ matrices

    def _run_labels(self, run) -> list[str]:
        """Labels a run answered, plus derived labels when every input was asked."""
        labels = json.loads(run.labels_json)
        if set(self.vocab.asked_ids) <= set(labels):
            return self.vocab.ids
        return [lab for lab in self.vocab.ids if lab in labels]

    def leaked_reports(self, *commits: str) -> set[str]:
        """Report ids used as few-shot examples in any of the given prompt versions."""
        out: set[str] = set()
        for commit in commits:
            out |= self._version_examples(commit)
        return out

    def _version_examples(self, commit: str) -> set[str]:
        """A prompt version's example report ids: from the database, else from Git (then recorded).

        Read from the full prompt set, not a reader's blinded copy: the record is shared by everyone."""
        if not _FULL_SHA.fullmatch(commit or ""):  # a ref like HEAD can move: never cached
            return self.prompts.prompt_set(commit).example_report_ids()
        with self.session() as s:
            known = q.version_examples(s, commit)
        if known is not None:
            return known
        ids = self.prompts.unblinded_prompt_set(commit).example_report_ids()
        with self.session() as s:
            q.put_version_examples(s, commit, ids)
        return ids

    def evaluation_inputs(
        self,
        run_id: int,
        extra_commits: tuple[str, ...] = (),
        reference: pd.DataFrame | None = None,
        test_look: str | None = None,
    ) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
        """(reference, predictions, excluded counts) aligned on the evaluable reports.

        reference: the cohort's reference matrix when the caller already has it (history, queue);
        test_look: the frozen commit of a counted test look (the only way a test cohort's run is measured).
        """
        abandoned = self.runs.settle_abandoned_runs(run_id=run_id)
        run = self.runs.run_info(run_id)
        if abandoned or run.status == "interrupted":  # part of a run is not a result: its figures would be read as one
            how = (
                "was left `running` by a process that is gone (killed, or its machine lost: it stopped renewing "
                "its lease), so it is now marked interrupted; its answers are kept and it"
                if abandoned
                else "was interrupted before it finished, so it"
            )
            raise UserError(f"run {run_id} {how} has no figures yet: resume with `workbench run --resume {run_id}`")
        self.splits.check_test_lock(run, test_look)  # a test cohort is measured only through a counted look
        cohort = self.study.cohort_name(run.cohort_id)
        labels = self._run_labels(run)
        y_true = (self.study.reference_matrix(cohort) if reference is None else reference)[labels]
        y_pred = self.runs.prediction_matrix(run_id)[labels]
        leaked = self.leaked_reports(run.prompt_commit, *extra_commits) & set(y_true.index)
        keep = [r for r in y_true.index if r not in leaked]
        y_true, y_pred = y_true.loc[keep], y_pred.loc[keep]
        asked = [lab for lab in labels if lab in self.vocab.asked_ids]
        excluded = {
            "reports used as few-shot examples (leakage)": len(leaked),
            "items waiting for adjudication": int(y_true[asked].isna().sum().sum()),
            "failed or missing predictions": int(y_pred[asked].isna().sum().sum()),
        }
        if self.study.blind_scope() is not None:  # a reader: only the reports they have finished count
            with self.session() as s:
                excluded["reports you have not finished reading (blinded)"] = (
                    len(q.report_ids(s, run.cohort_id)) - len(y_true) - len(leaked)
                )
        return y_true, y_pred, excluded

    # ------------------------------------------------------------ metrics

    def macro_policy(self, zero_division: str | None = None) -> str:
        """The zero-division policy of every macro figure: the one asked for, else the study's."""
        return zero_division or self.config.zero_division

    def evaluate_run(
        self,
        run_id: int,
        ci: str = "wilson",
        zero_division: str | None = None,
        n_resamples: int = 1000,
        seed: int = 0,
        reference: pd.DataFrame | None = None,
        test_look: str | None = None,
    ) -> Evaluation:
        """Per-label metrics with intervals, micro/macro averages, bootstrap of macro F1 (the study's
        zero-division policy unless another is asked for); test_look: the frozen commit a counted look measures."""
        zero_division = self.macro_policy(zero_division)
        y_true, y_pred, excluded = self.evaluation_inputs(run_id, reference=reference, test_look=test_look)
        key = (memo.frame_digest(y_true, y_pred), ci, zero_division, n_resamples, seed)
        kept = memo.EVALUATIONS.get(key)
        if kept is None:
            table = metrics.label_metrics(y_true, y_pred, ci=ci, zero_division=zero_division)
            avg = metrics.averages(table, zero_division=zero_division, ci=ci)
            boot = {}
            if n_resamples:
                boot = metrics.bootstrap_macro_f1(
                    y_true, y_pred, n_resamples=n_resamples, seed=seed, zero_division=zero_division
                )
                # F1 has no binomial interval: a bootstrap over reports gives one per label
                table = table.join(metrics.bootstrap_label_f1(y_true, y_pred, n_resamples=n_resamples, seed=seed))
            kept = (table, avg, boot)
            memo.EVALUATIONS.put(key, kept)
        table, avg, boot = kept
        self._record_scoring(run_id, table)
        macro = metrics.macro_figure(table["f1"], table["f1_undefined"], zero_division)
        return Evaluation(
            run_id, table.copy(), dict(avg), dict(boot), excluded, ci, zero_division, macro, list(y_true.columns)
        )

    def _record_scoring(self, run_id: int, table: pd.DataFrame) -> None:
        """Keep the per-label counts of a run's first scoring, so a later change of the reference shows."""
        if self.study.blind_scope() is not None or run_id in self._scored_runs():
            return  # a reader's figures cover only the reports they read: not the run's
        with self.session() as s:
            if q.run_scorings(s, [run_id]):
                self._scored_runs().add(run_id)
                return
        counts = {lab: [int(table.loc[lab, c]) for c in ("tp", "fp", "fn", "tn")] for lab in table.index}
        try:
            with self.session(write=True) as s:
                q.put_run_scoring(s, run_id, q.now(), counts)
        except Exception:  # a read-only or busy database: the figures are still shown, the record waits
            return
        self._scored_runs().add(run_id)

    def _scored_runs(self) -> set[int]:
        """Runs whose first scoring this Workbench has seen recorded (saves a read per evaluation)."""
        if not hasattr(self, "_scored"):
            self._scored: set[int] = set()
        return self._scored

    def reference_drift(self, run_ids: list[int]) -> list[dict]:
        """Runs whose reference changed since they were first scored: how (adjudications made, readings
        changed) and which figures moved (macro F1 under the study's policy, and each label's F1)."""
        with self.session() as s:
            scorings = q.run_scorings(s, list(run_ids))
        policy, out = self.macro_policy(), []
        for run_id in run_ids:
            if run_id not in scorings:
                continue
            scored_at, counts = scorings[run_id]
            run = self.runs.run_info(run_id)
            with self.session() as s:
                changes = q.reference_changes_since(s, run.cohort_id, scored_at)
            if not any(changes.values()):
                continue
            then = pd.DataFrame.from_dict(counts, orient="index", columns=["tp", "fp", "fn", "tn"])
            now = self.evaluate_run(run_id, n_resamples=0).table
            f1_then, f1_now = metrics.f1_from_counts(then, policy), metrics.f1_from_counts(now, policy)
            moved = {
                lab: (_plain(f1_then.get(lab)), _plain(f1_now[lab]))
                for lab in now.index
                if not _same(f1_then.get(lab), f1_now[lab])
            }
            out.append(
                {
                    "run": run_id,
                    "scored_at": scored_at,
                    **changes,
                    "labels": moved,
                    "macro_f1": (metrics.averages(then, policy)["macro_f1"], metrics.averages(now, policy)["macro_f1"]),
                }
            )
        return out

    def compare_runs(
        self, run_a: int, run_b: int, mid_p: bool = False, min_discordant: int = 10, zero_division: str | None = None
    ) -> Comparison:
        """Paired comparison of two runs on the same cohort: per-label deltas, McNemar + Holm, cases."""
        zero_division = self.macro_policy(zero_division)
        refuse_same_run(run_a, run_b)
        a, b = self.runs.run_info(run_a), self.runs.run_info(run_b)
        if a.cohort_id != b.cohort_id:
            raise StudyError(
                f"runs {run_a} and {run_b} are on different cohorts; a paired comparison needs the same reports"
            )
        y_true, pred_a, excluded = self.evaluation_inputs(run_a, extra_commits=(b.prompt_commit,))
        _, pred_b, excluded_b = self.evaluation_inputs(run_b, extra_commits=(a.prompt_commit,))
        labels = [lab for lab in y_true.columns if lab in pred_b.columns]
        y_true, pred_a, pred_b = y_true[labels], pred_a[labels], pred_b.reindex(index=y_true.index)[labels]
        table = metrics.compare_labels(
            y_true, pred_a, pred_b, mid_p=mid_p, min_discordant=min_discordant, zero_division=zero_division
        )
        ma = metrics.label_metrics(y_true, pred_a, zero_division=zero_division)
        mb = metrics.label_metrics(y_true, pred_b, zero_division=zero_division)
        for col in ("precision", "recall", "specificity", "kappa"):
            table[f"{col}_a"], table[f"{col}_b"] = ma[col], mb[col]
            table[f"delta_{col}"] = mb[col] - ma[col]
        cases = metrics.fixed_and_broken(y_true, pred_a, pred_b)
        excluded["failed or missing predictions (run B)"] = excluded_b["failed or missing predictions"]
        macro_a, macro_b = paired_macro(table, zero_division)
        return Comparison(
            run_a=run_a,
            run_b=run_b,
            table=table,
            cases=cases,
            excluded=excluded,
            macro_f1_a=macro_a.value,
            macro_f1_b=macro_b.value,
            macro_a=macro_a,
            macro_b=macro_b,
            zero_division=zero_division,
        )

    def iteration_history(self, cohort: str, ci: str = "wilson", include_unfinished: bool = False) -> pd.DataFrame:
        """Every finished run on a cohort in prompt-version order: macro and per-label accuracy and F1.

        Runs with failed or missing answers are no result (a run of 401s would show as F1 0 and pull a trend
        down): left out unless include_unfinished, and then marked in the `result` column.
        """
        runs = self.runs.run_results(cohort)
        if not include_unfinished:
            runs = runs[runs["result"] == "finished"]
        reference = self.study.reference_matrix(cohort) if len(runs) else None  # once for every run
        rows = []
        for run in runs.itertuples(index=False):
            ev = self.evaluate_run(int(run.id), ci=ci, n_resamples=0, reference=reference)
            version = prompt_repo.ordinal(self.paths.prompts, run.prompt_commit)
            row = {
                "run": int(run.id),
                "version": version,
                "prompt": run.prompt_commit[:8],
                "model": run.model,
                "started": run.started_at,
                "macro_accuracy": ev.averages["macro_accuracy"],
                "macro_f1": ev.averages["macro_f1"],
                "micro_f1": ev.averages["micro_f1"],
            }
            for lab in ev.table.index:
                row[f"accuracy:{lab}"] = ev.table.loc[lab, "accuracy"]
                row[f"f1:{lab}"] = ev.table.loc[lab, "f1"]
            rows.append(row)
            row["macro_labels"] = ev.macro.describe()
            row["result"] = run.result  # last: scripts that read the columns by position keep working
        frame = pd.DataFrame(rows)
        frame = frame.sort_values(["version", "run"]).reset_index(drop=True) if len(frame) else frame
        frame.attrs["macro_labels"] = sorted(set(frame["macro_labels"])) if len(frame) else []
        return frame

    def human_ceiling(self, run_id: int) -> pd.DataFrame:
        """Per label: labeller kappa beside readers' Fleiss kappa, mean reader accuracy, and the
        labeller's accuracy on unanimous and on split-vote items."""
        run = self.runs.run_info(run_id)
        cohort = self.study.cohort_name(run.cohort_id)
        ev = self.evaluate_run(run_id, n_resamples=0)
        with self.session() as s:
            readings = q.readings_frame(s, cohort_id=run.cohort_id)[["report_id", "label", "reader", "value"]]
        readings = self.study.blind_rows(readings[readings["label"].isin(self.vocab.asked_ids)])
        reference = self.study.reference(cohort, readings=readings)

        readings = agreement_readings(self, readings)  # adaptive reading: the full-overlap sample only
        fleiss = agreement.fleiss_kappa_table(readings)
        if "label" in fleiss.columns:
            fleiss = fleiss.set_index("label")
        rvr = agreement.reader_vs_reference(readings, reference[["report_id", "label", "value"]])
        mean_reader = rvr.groupby("label")["accuracy"].mean()
        split = agreement.vote_split(readings)
        unanimous = split.pivot(index="report_id", columns="label", values="unanimous")
        y_true, y_pred, _ = self.evaluation_inputs(run_id)
        asked = [lab for lab in y_true.columns if lab in unanimous.columns]
        mask_u = unanimous.reindex(index=y_true.index, columns=asked).fillna(False).astype(bool)
        acc_u = metrics.subset_accuracy(y_true[asked], y_pred[asked], mask_u)
        mask_s = ~mask_u
        if self.adaptive_settings().enabled:  # split = read by the sample's panel and not unanimous (not: unread)
            mask_s &= unanimous.reindex(index=y_true.index, columns=asked).notna()
        acc_s = metrics.subset_accuracy(y_true[asked], y_pred[asked], mask_s)
        out = pd.DataFrame(index=pd.Index(asked, name="label"))
        out["labeller_kappa"] = ev.table["kappa"].reindex(asked)
        out["readers_fleiss_kappa"] = fleiss["fleiss_kappa"].reindex(asked) if "fleiss_kappa" in fleiss else np.nan
        out["fleiss_note"] = fleiss["note"].reindex(asked) if "note" in fleiss else ""
        out["mean_reader_accuracy"] = mean_reader.reindex(asked)
        out["labeller_accuracy"] = ev.table["accuracy"].reindex(asked)
        out["accuracy_unanimous"] = acc_u["accuracy"]
        out["n_unanimous"] = acc_u["n"]
        out["accuracy_split"] = acc_s["accuracy"]
        out["n_split"] = acc_s["n"]
        return out.reset_index()

    # ------------------------------------------------------------ disagreements

    # ------------------------------------------------------------ the engineer's view of a case, and search

    def case_matrix(self, report_id: str, label: str | None = None) -> CaseMatrix:
        """One report's answers under every run that labelled it, side by side (one column per run and label),
        each with its call: the messages sent, the raw reply, the thinking kept apart, latency, tokens, cost."""
        self.require("see_unblinded")  # every labeller answer and the prompts' examples: never for a blinded reader
        label = self.study.label_id(label) if label else None
        with self.session() as s:
            report = q.get_report(s, report_id)
            if report is None:
                raise NotFound(f"no report {report_id!r}: give a report id of the study (see `workbench reference`)")
            preds = q.report_predictions(s, report_id, label)
            keys = [k for k in preds["call_key"].dropna().unique() if k]
            facts = q.call_facts(s, keys).set_index("call_key")
            replies = {**q.call_replies(s, keys), **{k: c.response for k, c in q.cached_calls(s, keys).items()}}
        columns, withheld, text, visible = [], [], "", {}
        for run_id, group in preds.groupby("run_id", sort=True):
            run = self.runs.run_info(int(run_id))
            if run.cohort_id not in visible:  # one split read per cohort, however many runs it has
                visible[run.cohort_id] = self._case_visible(run, report_id)
            if not visible[run.cohort_id]:
                withheld.append(int(run_id))
                continue
            text = text or compose_text(report.findings, report.impression, report.text, run.sections.split(","))
            sent = self._case_messages(run, report, list(group["label"]))
            columns += [_case_column(run, row, sent, facts, replies) for row in group.itertuples(index=False)]
        return CaseMatrix(report_id, label, text, tuple(columns), tuple(withheld))

    def _case_visible(self, run, report_id: str) -> bool:
        """May the person tuning prompts see this report's answers in this run (not a test or validation cohort
        or part)?"""
        try:
            shown = self.splits.queue_reports(run)
        except StudyError:  # a test or validation cohort: its text never reaches the person tuning prompts
            return False
        return shown is None or report_id in shown

    def _case_messages(self, run, report, labels: list[str]) -> dict:
        """call key -> the messages a run's calls for these labels of one report send (rendered again: the key
        proves they are the ones sent), plus label -> messages for a label whose key no longer matches."""
        asked = [lab for lab in labels if lab in self.vocab.asked_ids]
        if not asked:
            return {}
        cfg = labelling.model_config(self.runs.settings_from_params(json.loads(run.params_json)), strict=False)
        run_labels = json.loads(run.labels_json)
        frame = pd.DataFrame(
            [
                {
                    "report_id": report.id,
                    "findings": report.findings,
                    "impression": report.impression,
                    "text": report.text,
                }
            ]
        )
        done = set() if run.mode == "joint" else {(report.id, lab) for lab in run_labels if lab not in asked}
        requests = self.runs.build_requests(
            self.prompts.prompt_set(run.prompt_commit), frame, run_labels, run.mode, run.sections.split(","), cfg, done
        )
        out = {r.key: r.messages for r in requests}
        out.update({lab: r.messages for r in requests for lab in r.meta["labels"]})
        return out

    def search_run(
        self, run_id: int, query: str, where: str | None = None, regex: bool = False, label: str | None = None
    ) -> SearchResult:
        """(report, label) cases of a run whose report text, evidence or raw answer matches the query
        (case-insensitive; a substring, or a regular expression when regex), vectorised over the whole run."""
        self.require("see_unblinded")  # answers and evidence of reports a blinded reader has not read
        if where not in (None, *SEARCH_FIELDS):
            raise UserError(f"--in {where!r}: search in one of {', '.join(SEARCH_FIELDS)} (or leave it out for all)")
        if not query:
            raise UserError("give a text to search for")
        try:
            pattern = re.compile(query if regex else re.escape(query), re.IGNORECASE)
        except re.error as exc:
            raise UserError(
                f"{query!r} is not a valid regular expression ({exc}); leave out --regex to search "
                "for the text as it is"
            ) from None
        run = self.runs.run_info(run_id)
        shown = self.splits.queue_reports(run)  # validation text never reaches the person tuning prompts
        label = self.study.label_id(label) if label else None
        # a plain ASCII text is first narrowed in the database (lower() there folds ASCII only); the pattern decides
        like = None if regex or not query.isascii() else "%" + re.sub(r"([!%_])", r"!\1", query.lower()) + "%"
        found = []
        with self.session() as s:
            for name in SEARCH_FIELDS if where is None else (where,):
                if name == "report":
                    texts = self._search_texts(s, run)
                    hits = texts[texts["text"].str.contains(pattern, na=False)]
                    rows = q.search_rows(s, run_id, name, label=label, report_ids=hits["report_id"].tolist())
                    rows = rows.drop(columns="text").merge(hits, on="report_id")
                else:
                    rows = q.search_rows(s, run_id, name, like=like, label=label)
                    rows = rows[rows["text"].str.contains(pattern, na=False)]
                found.append(rows.assign(field=name))
        cases = pd.concat(found, ignore_index=True)
        if shown is not None:
            cases = cases[cases["report_id"].isin(shown)]
        cases = cases.assign(snippet=[_snippet(t, pattern) for t in cases["text"]])
        cases = cases.sort_values(["report_id", "label", "field"], kind="stable")[SEARCH_COLUMNS].reset_index(drop=True)
        return SearchResult(run_id, query, where, regex, cases)

    def _search_texts(self, s, run) -> pd.DataFrame:
        """report_id, text of the run's cohort as the labeller read them."""
        reports = q.reports_frame(s, cohort_id=run.cohort_id)
        sections = run.sections.split(",")
        return pd.DataFrame(
            {
                "report_id": reports["report_id"],
                "text": [
                    compose_text(f, i, t, sections)
                    for f, i, t in zip(reports["findings"], reports["impression"], reports["text"], strict=False)
                ],
            }
        )

    # ------------------------------------------------------------ error notes

    # ------------------------------------------------------------ comparison, as the Compare tab shows it

    SIGNIFICANT = ("better", "worse")

    def compare_view(self, run_a: int, run_b: int, n_resamples: int = 1000, seed: int = 0) -> CompareView:
        """compare_runs plus a paired bootstrap interval of each label's change in F1, rows sorted by
        change (significant first, then the largest change), and what each macro figure counts."""
        cmp = self.compare_runs(run_a, run_b)
        a, b = self.runs.run_info(run_a), self.runs.run_info(run_b)
        y_true, pred_a, _ = self.evaluation_inputs(run_a, extra_commits=(b.prompt_commit,))
        _, pred_b, _ = self.evaluation_inputs(run_b, extra_commits=(a.prompt_commit,))
        labels = list(cmp.table.index)
        pred_b = pred_b.reindex(index=y_true.index)
        interval = metrics.bootstrap_delta_f1(
            y_true[labels], pred_a[labels], pred_b[labels], n_resamples=n_resamples, seed=seed
        )
        table = cmp.table.join(interval)
        table["verdict_note"] = metrics.verdict_notes(table)  # now with the interval beside the test
        table["significant"] = table["verdict"].isin(self.SIGNIFICANT)
        table["changed"] = (table["b"] + table["c"] > 0) | (table["delta_f1"].fillna(0) != 0)
        table["size"] = table["delta_f1"].abs().fillna(table["delta_accuracy"].abs()).fillna(0)
        table = table.sort_values(["significant", "size"], ascending=[False, False], kind="stable").drop(columns="size")
        alone = {}
        for key, run_id in (("a", run_a), ("b", run_b)):
            ev = self.evaluate_run(run_id, n_resamples=0)
            t_alone, _, _ = self.evaluation_inputs(run_id)
            alone[key] = {"macro_f1": ev.averages["macro_f1"], "reports": len(t_alone)}
        leaked = len(
            self.leaked_reports(a.prompt_commit, b.prompt_commit)
            & set(self.study.reference_matrix(self.study.cohort_name(a.cohort_id)).index)
        )
        counts = {"reports": len(y_true), "labels": len(labels), "leaked_either": leaked, "alone": alone}
        return CompareView(**(cmp.to_dict() | {"table": table}), counts=counts)


# ---------------------------------------------------------------- the engineer's view of a case

CASE_ROWS = ["answer", "evidence", "status", "latency_s", "tokens", "cost", "finish_reason", "reported_model"]
SEARCH_FIELDS = ("report", "evidence", "answer")
SEARCH_COLUMNS = ["report_id", "label", "value", "status", "field", "snippet"]
SNIPPET_CHARS = 60  # characters shown either side of a match


@dataclass(frozen=True)
class CaseCall:
    """One call behind an answer: what was sent, the raw reply, the thinking (never parsed) and its facts
    (None where none were recorded: the offline labeller, a call made before facts were kept)."""

    key: str
    messages: tuple
    messages_match: bool  # False: the prompt renders differently now (the key no longer matches)
    reply: str | None  # None: no reply (a call error), or an offline failure (the answer's detail says why)
    reasoning: str | None
    latency_s: float | None
    attempts: int | None
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    cost: float | None
    finish_reason: str | None
    reported_model: str | None
    made_by_run: int | None  # the run that paid for it (another run when this one reused the answer)

    def to_json(self) -> dict:
        """The call as JSON-ready values (messages as a list)."""
        return {**dataclasses.asdict(self), "messages": [dict(m) for m in self.messages]}

    def facts(self) -> CallFacts:
        """Its recorded facts as a case shows them (the thinking is shown apart, with the reply)."""
        return CallFacts(
            call_key=self.key,
            run_id=self.made_by_run,
            labels="",
            latency_s=self.latency_s or 0.0,
            attempts=self.attempts or 1,
            prompt_tokens=self.prompt_tokens or 0,
            completion_tokens=self.completion_tokens or 0,
            cached_tokens=self.cached_tokens,
            cost=self.cost,
            finish_reason=self.finish_reason,
            reported_model=self.reported_model,
            reasoning=None,
        )


@dataclass(frozen=True)
class CaseColumn:
    """One run's answer for one (report, label)."""

    run_id: int
    prompt_commit: str
    prompt_ref: str
    model: str
    label: str
    value: int | None
    evidence: str
    status: str
    detail: str
    call: CaseCall | None

    @property
    def heading(self) -> str:
        """The column's name in the matrix: run, prompt version (short commit), model."""
        return f"run {self.run_id} · {self.prompt_commit[:8]} · {self.model}"

    def cells(self) -> list:
        """The matrix rows of this column, in CASE_ROWS order."""
        c = self.call
        tokens = None if c is None or c.prompt_tokens is None else c.prompt_tokens + (c.completion_tokens or 0)
        return [
            "no answer" if self.value is None else str(self.value),
            self.evidence,
            self.status,
            None if c is None else c.latency_s,
            tokens,
            None if c is None else c.cost,
            None if c is None else c.finish_reason,
            None if c is None else c.reported_model,
        ]


@dataclass(frozen=True)
class CaseMatrix:
    """One report's answers under every run that labelled it (the promptfoo / Langfuse matrix)."""

    report_id: str
    label: str | None  # None: every label of the report
    text: str  # the report as the labeller read it
    columns: tuple  # CaseColumn, oldest run first, labels in order
    withheld: tuple  # runs left out: their cohort (or part) is never shown to the person tuning prompts

    def table(self) -> pd.DataFrame:
        """Rows answer, evidence, status, latency, tokens, cost, finish reason, model; one column per run
        (rows per label as a second index level when the matrix has every label)."""
        labels = sorted({c.label for c in self.columns}, key=lambda lab: [c.label for c in self.columns].index(lab))
        headings = list(dict.fromkeys(c.heading for c in self.columns))
        index = pd.MultiIndex.from_product([labels, CASE_ROWS], names=["label", "row"])
        frame = pd.DataFrame(index=index, columns=headings, dtype=object)
        for c in self.columns:
            frame.loc[c.label, c.heading] = c.cells()
        if self.label is not None:
            frame = frame.droplevel("label")
            frame.index.name = "row"
        return frame

    def to_json(self) -> dict:
        """Everything, for export: the report, each column with its call (messages, raw reply, facts)."""
        return {
            "report_id": self.report_id,
            "label": self.label,
            "text": self.text,
            "withheld_runs": list(self.withheld),
            "columns": [
                {
                    **{k: v for k, v in dataclasses.asdict(c).items() if k != "call"},
                    "call": None if c.call is None else c.call.to_json(),
                }
                for c in self.columns
            ],
        }


@dataclass(frozen=True)
class SearchResult:
    """The (report, label) cases of a run that match a search, with where it matched and a snippet."""

    run_id: int
    query: str
    where: str | None
    regex: bool
    cases: pd.DataFrame  # SEARCH_COLUMNS


def _case_column(run, row, sent: dict, facts: pd.DataFrame, replies: dict) -> CaseColumn:
    """One prediction as a matrix column, with its call."""
    key = row.call_key or ""
    call = None
    if key or row.label in sent:
        fact = facts.loc[key].to_dict() if key in facts.index else {}
        messages = sent.get(key) or sent.get(row.label) or []

        def num(name, cast):
            value = fact.get(name)
            return None if pd.isna(value) else cast(value)

        call = CaseCall(
            key,
            tuple(messages),
            key in sent,
            replies.get(key),
            fact.get("reasoning") or None,
            num("latency_s", float),
            num("attempts", int),
            num("prompt_tokens", int),
            num("completion_tokens", int),
            num("cached_tokens", int),
            num("cost", float),
            fact.get("finish_reason"),
            fact.get("reported_model"),
            num("run_id", int),
        )
    value = None if pd.isna(row.value) else int(row.value)
    return CaseColumn(
        int(run.id),
        run.prompt_commit,
        run.prompt_ref or "",
        run.model,
        row.label,
        value,
        row.evidence or "",
        row.status,
        row.detail or "",
        call,
    )


def _snippet(text: str, pattern: re.Pattern) -> str:
    """The match with up to SNIPPET_CHARS characters either side, on one line."""
    m = pattern.search(text or "")
    if m is None:
        return ""
    start, end = max(0, m.start() - SNIPPET_CHARS), min(len(text), m.end() + SNIPPET_CHARS)
    part = text[start:end].replace("\n", " ")
    return ("..." if start else "") + part + ("..." if end < len(text) else "")
