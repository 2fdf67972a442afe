"""What a model costs and how it answers: estimates before a run, per-call facts after it, and the
noise floor (the same calls asked again) that says how many changes a comparison owes to chance."""

from __future__ import annotations

import dataclasses
import json
import math
import threading
from typing import TYPE_CHECKING

import pandas as pd

from workbench.errors import UserError
from workbench.labeller import labelling, llm
from workbench.labeller.endpoints import is_offline
from workbench.services.base import Service, StudyContext
from workbench.services.results import CallFacts, Suggestion
from workbench.store import queries as q
from workbench.study import StudyError

if TYPE_CHECKING:  # collaborators' types, for readers and type checkers only
    from workbench.services.prompting import PromptsService
    from workbench.services.runs import RunsService
    from workbench.services.study import StudyService

NOISE_SAMPLE = 200  # (report, label) answers re-asked by default
NOISE_REPEATS = 2  # times each is asked again


class NeedsConfirmation(UserError):
    """A run's estimated cost is above the study's labeller.confirm_above: nothing was sent."""

    def __init__(self, summary: str, hint: str = "") -> None:
        super().__init__(f"{summary}: nothing was sent" + (f"; {hint}" if hint else ""))
        self.summary = summary  # the cost and the limit, without how a terminal confirms (the app says its own way)


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of k successes in n (0, 0 for n = 0)."""
    if n == 0:
        return 0.0, 0.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


class ModelPathService(Service):
    """Estimates and budgets, per-call facts, noise measurements."""

    def __init__(self, ctx: StudyContext, study: StudyService, runs: RunsService, prompts: PromptsService) -> None:
        super().__init__(ctx)
        self.study = study
        self.runs = runs
        self.prompts = prompts

    # ------------------------------------------------------------ estimates and the budget

    # ------------------------------------------------------------ per-call facts

    def call_facts(self, run_id: int) -> pd.DataFrame:
        """Per call of a run: latency, tokens, cost, finish reason, the model that answered (those it made and
        those it reused from the cache, with the run that made them)."""
        self.runs.run_info(run_id)  # UnknownName for a run that does not exist
        with self.session() as s:
            keys = set(q.predictions_frame(s, run_id)["call_key"].dropna())
            facts = q.call_facts(s, keys)
        return facts.drop(columns=["reasoning"]).assign(from_cache=facts["run_id"] != run_id)

    def call_costs(self, run_id: int) -> pd.DataFrame:
        """Per label: calls with facts, tokens, cost, cost and tokens per label answer, median latency, truncated."""
        facts = self.call_facts(run_id)
        cols = [
            "label",
            "calls",
            "prompt_tokens",
            "completion_tokens",
            "cached_tokens",
            "cost",
            "cost_per_label",
            "tokens_per_label",
            "median_latency_s",
            "truncated",
            "evidence_quoted",
            "evidence_not_in_report",
        ]
        if facts.empty:
            return pd.DataFrame(columns=cols)
        evidence = self.evidence_check(run_id).set_index("label")
        rows = []
        facts = facts.assign(label=facts["labels"].str.split(","))
        share = 1.0 / facts["label"].str.len()  # a joint call's cost is split evenly over the labels it asked
        facts = facts.assign(share=share).explode("label")
        for label, g in facts.groupby("label", sort=True):
            cost = (g["cost"].astype(float) * g["share"]).sum(min_count=1)
            tokens = ((g["prompt_tokens"] + g["completion_tokens"]) * g["share"]).sum()
            rows.append(
                {
                    "label": label,
                    "calls": len(g),
                    "prompt_tokens": int((g["prompt_tokens"] * g["share"]).sum()),
                    "completion_tokens": int((g["completion_tokens"] * g["share"]).sum()),
                    "cached_tokens": int(pd.to_numeric(g["cached_tokens"]).fillna(0).mul(g["share"]).sum()),
                    "cost": None if pd.isna(cost) else float(cost),
                    "cost_per_label": None if pd.isna(cost) else float(cost) / len(g),
                    "tokens_per_label": float(tokens) / len(g),
                    "median_latency_s": float(g["latency_s"].median()),
                    "truncated": int((g["finish_reason"] == "length").sum()),
                    "evidence_quoted": int(evidence["evidence_quoted"].get(label, 0)),
                    "evidence_not_in_report": int(evidence["evidence_not_in_report"].get(label, 0)),
                }
            )
        return pd.DataFrame(rows, columns=cols)

    def evidence_check(self, run_id: int) -> pd.DataFrame:
        """Per label: answers that quote evidence, and how many of those quotes are not in the report (made up, or
        copied from the prompt): a small model's 0/1 may be right for a reason it invented."""
        self.runs.run_info(run_id)
        with self.session() as s:
            preds = q.predictions_frame(s, run_id)
        quoted = preds["value"].notna() & preds["evidence"].fillna("").astype(str).str.strip().ne("")
        missing = quoted & preds["evidence_found"].map(lambda v: v is False).astype(bool)
        frame = pd.DataFrame({"label": preds["label"], "quoted": quoted.astype(int), "missing": missing.astype(int)})
        sums = frame.groupby("label", sort=True)[["quoted", "missing"]].sum()
        return pd.DataFrame(
            {
                "label": list(sums.index),
                "evidence_quoted": [int(v) for v in sums["quoted"]],
                "evidence_not_in_report": [int(v) for v in sums["missing"]],
            },
            columns=EVIDENCE_CHECK,
        )

    def call_fact(self, call_key: str | None) -> CallFacts | None:
        """One call's facts, reasoning included (the case view), None when none were recorded."""
        if not call_key:
            return None
        with self.session() as s:
            facts = q.call_facts(s, [call_key])
        return None if facts.empty else CallFacts(**facts.iloc[0].to_dict())

    # ------------------------------------------------------------ the noise floor

    def measure_noise(
        self,
        run_id: int,
        sample: int = NOISE_SAMPLE,
        repeats: int = NOISE_REPEATS,
        seed: int = 0,
        cancel: threading.Event | None = None,
    ) -> NoiseResult:
        """Ask a stratified sample of a run's answered (report, label) pairs again, repeats times, bypassing the
        cache (a new seed each time where the model takes one); store the repeats apart from the run and
        return the share that differ from the run's answer, per label and overall."""
        self.require("run")
        if sample < 1 or repeats < 1:
            raise UserError("--sample and --repeats must be at least 1")
        run = self.runs.run_info(run_id)
        settings = self.runs.settings_from_params(json.loads(run.params_json))
        cfg = labelling.model_config(settings)
        if is_offline(cfg.model):  # the rule engine answers the same text the same way, every time
            return NoiseResult(run_id, 0, cfg.model, 0, repeats, pd.DataFrame(columns=NOISE_TABLE), deterministic=True)
        self.runs.check_endpoint(settings)
        with self.session() as s:
            preds = q.predictions_frame(s, run_id)
        picked = stratified_sample(preds[preds["value"].notna()], sample, seed)
        if picked.empty:
            raise StudyError(f"run {run_id} has no answered (report, label) pair to repeat")
        requests = self._noise_requests(run, cfg, picked)
        original = {
            (r, lab): int(v) for r, lab, v in zip(picked["report_id"], picked["label"], picked["value"], strict=False)
        }

        seeded = llm.accepts_seed(cfg.model)
        with self.session() as s:
            measurement = q.next_noise_measurement(s, run_id)
        rows: list[tuple] = []
        for k in range(1, repeats + 1):
            cfg_k = dataclasses.replace(cfg, seed=(cfg.seed or 0) + k) if seeded else cfg
            answers: list = []
            labelling.label_calls(requests, cfg_k, lambda _keys: {}, answers.extend, cancel=cancel)  # no cache
            rows += [
                (
                    run_id,
                    measurement,
                    a.req.meta["report_id"],
                    lab,
                    k,
                    cfg_k.seed if seeded else None,
                    original[(a.req.meta["report_id"], lab)],
                    d.value,
                    d.status,
                )
                for a in answers
                for lab, d in a.decisions.items()
                if (a.req.meta["report_id"], lab) in original
            ]
        with self.session(write=True) as s:
            q.put_noise_repeats(s, rows)
            q.add_audit(
                s,
                self.actor.user,
                "noise",
                "run",
                str(run_id),
                None,
                {"measurement": measurement, "pairs": len(picked), "repeats": repeats},
            )
        frame = pd.DataFrame(rows, columns=q.NOISE_COLUMNS)
        return NoiseResult(run_id, measurement, cfg.model, len(picked), repeats, noise_table(frame), seeded=seeded)

    def _noise_requests(self, run, cfg, picked: pd.DataFrame) -> list:
        """The run's own calls for the picked pairs (joint runs: each picked report's whole call)."""
        labels = json.loads(run.labels_json)
        wanted = set(zip(picked["report_id"], picked["label"], strict=False))
        ids = sorted(set(picked["report_id"]))
        with self.session() as s:
            reports = q.reports_frame(s, ids=ids)
        done = set() if run.mode == "joint" else {(r, lab) for r in ids for lab in labels} - wanted
        return self.runs.build_requests(
            self.prompts.prompt_set(run.prompt_commit), reports, labels, run.mode, run.sections.split(","), cfg, done
        )

    def noise_rates(self, run_ids) -> pd.DataFrame:
        """Noise rate per label (and overall, label "all") from every noise measurement of these runs."""
        with self.session() as s:
            frame = q.noise_repeats(s, run_ids)
        table = noise_table(frame)
        return table[table["rate"].notna()].reset_index(drop=True)  # a label whose every repeat failed is unmeasured

    def comparison_noise(self, run_a: int, run_b: int, table: pd.DataFrame, part: str = "") -> list[str]:
        """Beside fixed (c) and broken (b) per label of a comparison table: how many changes noise alone would
        explain at the runs' measured noise rate, flagged where noise could produce the verdict; one line
        saying it is not measured when neither run's noise was."""
        rates = self.noise_rates([run_a, run_b])
        if rates.empty:
            return [not_measured(run_b)]
        return [
            noise_line(label, part, int(row["n"]), int(row["b"] + row["c"]), rates)
            for label, row in table.iterrows()
            if int(row["b"] + row["c"])
        ]

    def suggestion_noise_lines(self, result: Suggestion) -> list[str]:
        """suggestion_noise as lines, or the not-measured line when the suggestion's run has no noise measurement."""
        if result.status != "ok":
            return []
        if self.noise_rates([result.run]).empty:
            return [not_measured(result.run)]
        line = self.suggestion_noise(result)
        return [line] if line else []

    def suggestion_noise(self, result: Suggestion) -> str:
        """How many of a suggestion's validation changes noise alone would explain at the run's measured noise rate."""
        part = ((result.evaluation or {}).get("parts") or {}).get("validation")
        if result.status != "ok" or not part:
            return ""
        rates = self.noise_rates([result.run])
        changed = int(part["fixed"]) + int(part["broken"])
        return noise_line(result.label, "validation", int(part["reports"]), changed, rates) if changed else ""


NOISE_TABLE = ["label", "repeats", "differ", "failed", "rate", "lo", "hi"]
EVIDENCE_CHECK = ["label", "evidence_quoted", "evidence_not_in_report"]


def stratified_sample(preds: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    """n (report, label) answers drawn per (label, value) stratum in proportion to its size, each stratum at least
    once while n allows (rare positives are repeated too), reproducibly from seed."""
    if len(preds) <= n:
        return preds[["report_id", "label", "value"]].reset_index(drop=True)
    strata = list(preds.groupby(["label", "value"], sort=True))
    quota = {key: max(1, round(n * len(g) / len(preds))) for key, g in strata}
    while sum(quota.values()) > n:  # rounding and the at-least-one rule may overshoot: trim the largest
        largest = max(quota, key=lambda k: quota[k])
        quota[largest] -= 1
    parts = [g.sample(n=min(len(g), quota[key]), random_state=seed) for key, g in strata if quota[key] > 0]
    return pd.concat(parts)[["report_id", "label", "value"]].reset_index(drop=True)


def noise_table(repeats: pd.DataFrame) -> pd.DataFrame:
    """Per label and overall ("all"): answered repeats, how many differ from the run's answer, the rate, Wilson 95%."""
    if repeats.empty:
        return pd.DataFrame(columns=NOISE_TABLE)
    rows = []
    groups = [(lab, g) for lab, g in repeats.groupby("label", sort=True)] + [("all", repeats)]
    for label, g in groups:
        answered = g[g["value"].notna()]
        differ = int((answered["value"].astype(int) != answered["original"].astype(int)).sum())
        # no answered repeat: not measured (NaN), never a rate of 0 that would claim the model is steady
        lo, hi = wilson(differ, len(answered)) if len(answered) else (math.nan, math.nan)
        rows.append(
            {
                "label": label,
                "repeats": len(answered),
                "differ": differ,
                "failed": len(g) - len(answered),
                "rate": differ / len(answered) if len(answered) else math.nan,
                "lo": lo,
                "hi": hi,
            }
        )
    return pd.DataFrame(rows, columns=NOISE_TABLE)


class NoiseResult:
    """One noise measurement: what was repeated and the noise rate per label and overall."""

    def __init__(
        self,
        run_id: int,
        measurement: int,
        model: str,
        pairs: int,
        repeats: int,
        table: pd.DataFrame,
        deterministic: bool = False,
        seeded: bool = False,
    ) -> None:
        self.run_id, self.measurement, self.model, self.pairs, self.repeats = run_id, measurement, model, pairs, repeats
        self.table, self.deterministic, self.seeded = table, deterministic, seeded

    def overall(self) -> tuple[float, float, float]:
        """(rate, lo, hi) over every repeated answer."""
        if self.deterministic:
            return 0.0, 0.0, 0.0
        if self.table.empty:
            return math.nan, math.nan, math.nan
        row = self.table.set_index("label").loc["all"]
        return float(row["rate"]), float(row["lo"]), float(row["hi"])

    def lines(self) -> list[str]:
        """The measurement for a person: per label and overall `noise rate X [lo, hi]`."""
        if self.deterministic:
            return [
                f"run {self.run_id} ({self.model}): noise rate 0 [0, 0] - the offline labeller is deterministic "
                "(the same text always gets the same answer); nothing was asked again"
            ]
        seeds = "a new seed per repeat" if self.seeded else "the model takes no seed: same parameters each time"
        out = [
            f"run {self.run_id} ({self.model}), measurement {self.measurement}: {self.pairs} (report, label) answers "
            f"asked {self.repeats} more time(s) each, bypassing the cache ({seeds})"
        ]
        for row in self.table.itertuples(index=False):
            if not row.repeats:
                out.append(
                    f"{row.label}: noise not measured - all {row.failed} repeat(s) failed, so there is no answer to "
                    f"compare; run `workbench noise {self.run_id}` again once the model answers"
                )
                continue
            failed = f", {row.failed} failed" if row.failed else ""
            out.append(
                f"{row.label}: noise rate {row.rate:.3f} [{row.lo:.3f}, {row.hi:.3f}] "
                f"({row.differ} of {row.repeats} repeats differ{failed})"
            )
        return out


def not_measured(run_id: int) -> str:
    """What a comparison says when the model's own noise was never measured."""
    return f"noise: not measured (`workbench noise {run_id}` says how many changes the model's own noise explains)"


def noise_line(label: str, part: str, reports: int, changed: int, rates: pd.DataFrame) -> str:
    """Of `changed` changes on `reports` reports, how many noise alone would explain at the measured rate (expected,
    and at the interval's upper end), flagged when noise could produce the verdict; "" without a measurement."""
    if rates.empty:
        return ""
    by_label = rates.set_index("label")
    r = by_label.loc[label] if label in by_label.index else by_label.loc["all"]
    expected, high = reports * float(r["rate"]), reports * float(r["hi"])
    flag = " - noise alone could produce this verdict" if changed <= high else ""
    return (
        f"noise, {label}{' (' + part + ')' if part else ''}: {changed} changed; at noise rate {float(r['rate']):.3f} "
        f"noise alone would explain about {expected:.1f} (up to {high:.1f}){flag}"
    )
