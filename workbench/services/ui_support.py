"""The app's composite reads the other services do not offer: the disagreement queue's order, the
adjudication worklist, the Compare tab's view, robustness with the study's cache, detached runs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from workbench import bundle as bundle_mod
from workbench import scoring
from workbench.core import metrics
from workbench.services.background import start_run_in_process
from workbench.services.base import Service, StudyContext
from workbench.services.freezing import StudyExtractionCache
from workbench.store import queries as q
from workbench.study import PROJECT_ROOT, StudyError

if TYPE_CHECKING:  # collaborators' types, for readers and type checkers only
    from workbench.services.evaluation import EvaluationService
    from workbench.services.prompting import PromptsService
    from workbench.services.runs import RunsService
    from workbench.services.study import StudyService
    from workbench.services.triage import TriageService

ROBUSTNESS_PAIRS = PROJECT_ROOT / "annotations" / "robustness" / "pairs.csv"


class UISupportService(Service):
    """Queues in the app's order, the compare view, robustness with the study's cache, detached runs."""

    def __init__(
        self,
        ctx: StudyContext,
        study: StudyService,
        runner: RunsService,
        prompts: PromptsService,
        evaluation: EvaluationService,
        triage: TriageService,
    ) -> None:
        super().__init__(ctx)
        self.study = study
        self.runner = runner
        self.prompts = prompts
        self.evaluation = evaluation
        self.triage = triage

    def start_run_detached(self, cohort: str, on_progress=None, cancel=None, **run_kwargs):
        """start_run in its own process (services/background.py): the app stays responsive."""
        self.require("run")
        return start_run_in_process(
            self.root, self.actor, on_progress=on_progress, cancel=cancel, cohort=cohort, **run_kwargs
        )

    # ------------------------------------------------------------ disagreements: order and highlights

    QUEUE_ORDERS = {
        "errors": "labels with the highest error rate first (then fewest positives), reports in cohort order",
        "broken": "cases the last prompt change broke first (against the run before this one), then by label error rate",
    }

    def previous_run(self, run_id: int) -> int | None:
        """The finished run before this one on the same cohort, or None."""
        run = self.runner.run_info(run_id)
        runs = self.runner.runs()
        done = runs[
            runs["status"].isin(["finished", "incomplete"])
            & (runs["cohort_id"] == run.cohort_id)
            & (runs["id"] < run_id)
        ]
        return int(done["id"].max()) if len(done) else None

    def disagreement_queue(
        self,
        run_id: int,
        label: str | None = None,
        kind: str | None = None,
        category: str | None = None,
        order: str = "errors",
    ) -> tuple[pd.DataFrame, str]:
        """The disagreement queue in the chosen order, with a sentence saying which order is used."""
        if order not in self.QUEUE_ORDERS:
            raise StudyError(f"order must be one of {', '.join(self.QUEUE_ORDERS)}, got {order!r}")
        queue = self.triage.disagreements(run_id, label, kind, category)
        queue["broken_by_last_change"] = False
        if order == "errors":
            return queue, self.QUEUE_ORDERS[order]
        previous = self.previous_run(run_id)
        if previous is None:
            return queue, "no earlier run on this cohort: " + self.QUEUE_ORDERS["errors"]
        cases = self.evaluation.compare_runs(previous, run_id)["cases"]
        broken = set(zip(*(cases.loc[cases["change"] == "broken", c] for c in ("report", "label")), strict=False))
        queue["broken_by_last_change"] = [k in broken for k in zip(queue["report_id"], queue["label"], strict=False)]
        queue = queue.sort_values("broken_by_last_change", ascending=False, kind="stable").reset_index(drop=True)
        return queue, self.QUEUE_ORDERS[
            order
        ] + f" (run {previous} -> {run_id}: {int(queue['broken_by_last_change'].sum())} broken)"

    def with_fresh_notes(self, queue: pd.DataFrame, category: str | None = None) -> pd.DataFrame:
        """A queue with its note counts and categories read now (one query), then filtered by category."""
        with self.session() as s:
            notes = q.notes_frame(s)
        out = queue.copy()
        if notes.empty:
            out["notes"], out["categories"] = 0, ""
        else:  # look the (small) note table up by key: a merge over a 10,000-row queue costs more
            agg = notes.groupby(["report_id", "label"]).agg(
                notes=("id", "count"), categories=("category", lambda x: ", ".join(sorted(set(x))))
            )
            keys = pd.MultiIndex.from_arrays([out["report_id"].to_numpy(), out["label"].to_numpy()])
            out["notes"] = agg["notes"].reindex(keys).fillna(0).astype(int).to_numpy()
            out["categories"] = agg["categories"].reindex(keys).fillna("").to_numpy()
        if category:
            out = out[out["categories"].str.contains(category, regex=False)]
        return out.reset_index(drop=True)

    def label_phrases(self, label: str, prompt_ref: str | None = None) -> list[str]:
        """What to look for in a report for a label: its prompt's look-for phrases and its name."""
        names = self.vocab.names()
        label = self.study.label_id(label)
        phrases = [names.get(label, label)]
        words = re.findall(r"[A-Za-z]+", phrases[0])
        if len(words) > 1:  # a close synonym: the name's main word ("Pleural Effusion" -> "effusion")
            head = max(words, key=len)
            if len(head) >= 5:
                phrases.append(head[:-1] if head.endswith("s") else head)
        if label in self.vocab.asked_ids:
            phrases += list(self.prompts.label_prompt(label, prompt_ref).look_for)
        return list(dict.fromkeys(p.strip() for p in phrases if p and p.strip()))

    # ------------------------------------------------------------ adjudication order

    def adjudication_worklist(self, cohort: str | None = None) -> pd.DataFrame:
        """Items waiting for a senior reader: flagged ones first, then ties, then too few readers; why each waits."""
        queue = self.study.adjudication_queue(cohort)
        tie = (queue["positives"] * 2 == queue["n_readers"]) & (queue["n_readers"] > 0)
        queue["why"] = np.where(
            queue["flagged"],
            "flagged: the reference may be wrong",
            np.where(tie, "tie", queue["reason"].replace("", "waiting")),
        )
        queue["rank"] = np.where(queue["flagged"], 0, np.where(tie, 1, 2))
        return queue.sort_values("rank", kind="stable").drop(columns="rank").reset_index(drop=True)

    # ------------------------------------------------------------ comparison, as the Compare tab shows it

    SIGNIFICANT = ("better", "worse")

    def compare_view(self, run_a: int, run_b: int, n_resamples: int = 1000, seed: int = 0) -> dict:
        """compare_runs plus a paired bootstrap interval of each label's change in F1, rows sorted by
        change (significant first, then the largest change), and what each macro figure counts."""
        cmp = self.evaluation.compare_runs(run_a, run_b)
        a, b = self.runner.run_info(run_a), self.runner.run_info(run_b)
        y_true, pred_a, _ = self.evaluation.evaluation_inputs(run_a, extra_commits=(b.prompt_commit,))
        _, pred_b, _ = self.evaluation.evaluation_inputs(run_b, extra_commits=(a.prompt_commit,))
        labels = list(cmp["table"].index)
        pred_b = pred_b.reindex(index=y_true.index)
        interval = metrics.bootstrap_delta_f1(
            y_true[labels], pred_a[labels], pred_b[labels], n_resamples=n_resamples, seed=seed
        )
        table = cmp["table"].join(interval)
        table["verdict_note"] = metrics.verdict_notes(table)  # now with the interval beside the test
        table["significant"] = table["verdict"].isin(self.SIGNIFICANT)
        table["changed"] = (table["b"] + table["c"] > 0) | (table["delta_f1"].fillna(0) != 0)
        table["size"] = table["delta_f1"].abs().fillna(table["delta_accuracy"].abs()).fillna(0)
        table = table.sort_values(["significant", "size"], ascending=[False, False], kind="stable").drop(columns="size")
        alone = {}
        for key, run_id in (("a", run_a), ("b", run_b)):
            ev = self.evaluation.evaluate_run(run_id, n_resamples=0)
            t_alone, _, _ = self.evaluation.evaluation_inputs(run_id)
            alone[key] = {"macro_f1": ev.averages["macro_f1"], "reports": len(t_alone)}
        leaked = len(
            self.evaluation._leaked_reports(a.prompt_commit, b.prompt_commit)
            & set(self.study.reference_matrix(self.study._cohort_name(a.cohort_id)).index)
        )
        counts = {"reports": len(y_true), "labels": len(labels), "leaked_either": leaked, "alone": alone}
        return {**cmp, "table": table, "counts": counts}

    def default_robustness_pairs(self) -> Path:
        """The shipped synthetic paraphrase / significant-change pairs."""
        return ROBUSTNESS_PAIRS

    def robustness(self, bundle_path: Path, pairs=None, model: str | None = None) -> dict:
        """Robustness and discrimination of a bundle on text pairs, using the study's extraction cache."""
        b = bundle_mod.load_bundle(Path(bundle_path))
        return scoring.robustness(
            b,
            pairs,
            model=model,  # None: the shipped pairs that fit the bundle's vocabulary
            cache=StudyExtractionCache(self),
            allow_endpoints=list(self.config.allowed_endpoints),
        )
