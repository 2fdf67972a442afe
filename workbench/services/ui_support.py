"""Small read-side use-cases the app needs and the other services do not offer yet.

Kept in a separate mixin so the lead can fold it into `Workbench` (``class Workbench(...,
UISupportService)``); until then the app mixes it in itself (workbench/ui/state.py). Nothing here
writes except through the existing services.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from workbench.core.text import compose_text
from workbench.store import queries as q
from workbench.study import PROJECT_ROOT, StudyError

ROBUSTNESS_PAIRS = PROJECT_ROOT / "annotations" / "robustness" / "pairs.csv"


class UISupportService:
    """Reports to read, a reader's own queue, readers, robustness with the study's cache."""

    def readers(self) -> list[str]:
        """Every reader id known to the study (for choosing a name in local mode)."""
        with self.session() as s:
            return q.list_readers(s)

    def report_text(self, report_id: str) -> dict:
        """One report's text as readers see it (the study's sections), without any labels."""
        with self.session() as s:
            report = q.get_report(s, report_id)
            if report is None:
                raise StudyError(f"no report {report_id!r}")
            return {"report_id": report_id, "findings": report.findings, "impression": report.impression,
                    "text": compose_text(report.findings, report.impression, report.text, self.config.sections)}

    def reading_queue(self, reader: str, cohort: str) -> pd.DataFrame:
        """A cohort's reports in order with how many labels this reader has marked (only their own readings)."""
        if reader and reader != self.current_actor().user:
            self.require("see_unblinded")
        with self.session() as s:
            cohort_row = q.get_cohort(s, cohort)
            if cohort_row is None:
                raise StudyError(f"no cohort {cohort!r}")
            ids = q.report_ids(s, cohort_row.id)
            mine = q.readings_frame(s, reader=reader) if reader else pd.DataFrame(columns=["report_id", "label"])
        mine = mine[mine["label"].isin(self.vocab.asked_ids)]
        marked = mine.groupby("report_id").size()
        out = pd.DataFrame({"report_id": ids})
        out["marked"] = out["report_id"].map(marked).fillna(0).astype(int)
        out["complete"] = out["marked"] >= len(self.vocab.asked_ids)
        return out

    def default_robustness_pairs(self) -> Path:
        """The shipped synthetic paraphrase / significant-change pairs."""
        return ROBUSTNESS_PAIRS

    def robustness(self, bundle_path: Path, pairs=None, model: str | None = None) -> dict:
        """Robustness and discrimination of a bundle on text pairs, using the study's extraction cache."""
        from workbench import bundle as bundle_mod, scoring
        from workbench.services.freezing import StudyExtractionCache

        b = bundle_mod.load_bundle(Path(bundle_path))
        return scoring.robustness(b, pairs if pairs is not None else ROBUSTNESS_PAIRS, model=model,
                                  cache=StudyExtractionCache(self), allow_endpoints=list(self.config.allowed_endpoints))
