"""The label set of a study: mined from a cohort, reviewed by its radiologists, adopted as its vocabulary.

Ran Score's first step, before any reference or prompt: which findings does this corpus hold? Mining
(offline rules, or a model through the one labelling path with its cache, estimate, destination guard
and cost) proposes ranked candidates (workbench/core/labelset.py); reviewers vote blind (approve, reject,
merge into another candidate, rename) under the study's approval rule, an adjudicator settles what stays
contested, and every vote and edit goes to the audit trail; the approved set becomes a vocabulary file
committed beside the prompts, with a starter prompt per new label.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from workbench.core import labelset as ls
from workbench.core.prompts import call_keyer
from workbench.core.text import compose_text
from workbench.core.yaml_text import load_yaml
from workbench.labeller.endpoints import is_offline
from workbench.services.base import Service, StudyContext
from workbench.store import labelsets as store
from workbench.store import prompt_repo
from workbench.store import queries as q
from workbench.study import PROMPTS_DIR, VOCAB_FILE, StudyError, find_vocabulary_file, load_vocabulary_file

if TYPE_CHECKING:
    from workbench.services.prompting import PromptsService
    from workbench.services.runs import RunsService
    from workbench.services.study import StudyService

ENGINES = ("offline", "model")
VOCAB_IN_REPO = "vocabulary.yml"  # .yml: the prompt set reads every .yaml file of the repo as a label prompt
TOP_K = (10, 20, 40)


@dataclass
class Mining:
    """What one mining did: the ranked candidates, the long tail, the engine's calls, a comparison if asked."""

    labelset: str
    engine: str
    reports: int
    candidates: list[ls.Candidate]
    comparison: ls.Comparison | None = None
    calls: dict = field(default_factory=dict)

    def tail(self) -> dict[int, float]:
        """Share of affirmed mentions the top k candidates cover, for k in TOP_K."""
        return {k: ls.top_share(self.candidates, k) for k in TOP_K}


class LabelSetService(Service):
    """Mine, compare, review and adopt a study's label set."""

    def __init__(self, ctx: StudyContext, study: StudyService, runs: RunsService, prompts: PromptsService) -> None:
        super().__init__(ctx)
        self.study = study
        self.runs = runs
        self.prompts = prompts

    # ------------------------------------------------------------ mining

    def labelset_lexicon(self) -> ls.Lexicon:
        """The word lists of the study's task (its attribute cues and the labeller's placing words)."""
        from workbench.labeller import mining

        return mining.lexicon(self.prompts.prompt_set().task)

    def _reports(self, cohort: str) -> list[tuple[str, str]]:
        """(report id, text the labeller reads) of a cohort, in import order."""
        sections = list(self.config.sections)
        with self.session() as s:
            frame = q.reports_frame(s, cohort_id=self.study.cohort_id(cohort))
        return [
            (r.report_id, compose_text(r.findings, r.impression, r.text, sections))
            for r in frame.itertuples(index=False)
        ]

    def mine_labelset(
        self,
        cohort: str,
        engine: str = "offline",
        against: str | None = None,
        min_reports: int = 2,
        labelset: str | None = None,
        model: str | None = None,
        on_progress=None,
        **overrides,
    ) -> Mining:
        """Mine a cohort's candidates, store them as the label set (named after the cohort unless given) while
        nobody has voted on it, and compare them with a vocabulary when asked."""
        self.require("run")
        if engine not in ENGINES:
            raise StudyError(f"unknown engine {engine!r}: use one of {', '.join(ENGINES)}")
        name = labelset or cohort
        reports = self._reports(cohort)
        task = self.prompts.prompt_set().task
        calls: dict = {}
        if engine == "offline":
            from workbench.labeller import mining

            candidates = mining.mine(reports, task, min_reports)
        else:
            candidates, calls = self._mine_with_model(reports, model, min_reports, on_progress, **overrides)
        lex = self.labelset_lexicon()
        labels = self._label_words(against or "study")
        ls.mark_overlaps(candidates, labels, lex)
        comparison = ls.compare(candidates, labels, lex, against) if against else None
        self._store(name, candidates)
        return Mining(name, engine, len(reports), candidates, comparison, calls)

    def _store(self, name: str, candidates: list[ls.Candidate]) -> None:
        """Keep the candidates as the label set, unless a review of it has begun (votes are never thrown away)."""
        with self.session(write=True) as s:
            if store.vote_rows(s, name):
                raise StudyError(
                    f"label set {name!r} is under review (votes recorded): mine into another with --labelset NAME"
                )
            store.replace_candidates(s, name, [c.to_json() for c in candidates], self.current_actor().user)

    def _model_requests(self, reports, cfg) -> list:
        """One extraction call per report, keyed like every labelling call (messages and parameters)."""
        from workbench.labeller import labelling
        from workbench.labeller.llm import CallRequest

        key_of = call_keyer(labelling.call_params(cfg))
        out = []
        for rid, text in reports:
            messages = [{"role": "system", "content": ls.EXTRACTION_INSTRUCTIONS}, {"role": "user", "content": text}]
            meta = {"report_id": rid, "labels": ["findings"], "report": text, "mode": labelling.EXTRACT_MODE}
            out.append(CallRequest(key_of(messages), messages, meta))
        return out

    def _model_config(self, model: str | None, **overrides):
        """The labeller's model for extraction calls, after the destination guard (no schema: the reply is a list)."""
        from workbench.labeller import labelling

        settings = self.runs.labeller_settings(model, **overrides)
        if is_offline(settings.get("model", "")):
            raise StudyError("the model engine needs a model (--model); the offline engine is --engine offline")
        self.runs.check_model_name(settings)
        self.runs.check_endpoint(settings)  # report text goes only where an admin allowed it
        cfg = dataclasses.replace(labelling.model_config(settings), response_schema=False, json_mode=False)
        return self.runs.routed(cfg), settings

    def estimate_mining(self, cohort: str, model: str | None = None, **overrides):
        """What mining a cohort with a model would cost (calls after the cache, tokens, cost, time); no call."""
        from workbench.labeller import labelling
        from workbench.services.runs import is_local_model

        cfg, settings = self._model_config(model, **overrides)
        requests = self._model_requests(self._reports(cohort), cfg)
        with self.session() as s:
            cached = set(q.cached_calls(s, [r.key for r in requests]))
            history = q.model_call_history(s, cfg.model)
        return labelling.estimate_calls(
            requests, cfg, cached, price=settings.get("price"), local=is_local_model(settings), history=history
        )

    def _mine_with_model(self, reports, model, min_reports, on_progress, **overrides):
        """Candidates from a model's findings lists: one call per report through the labelling path."""
        from workbench.labeller import labelling
        from workbench.services.runs import cache_entries

        cfg, _ = self._model_config(model, **overrides)
        requests = self._model_requests(reports, cfg)
        found: dict[str, list] = {}

        def keep(answers) -> None:
            for a in answers:
                d = a.decisions["findings"]
                if d.value is not None:
                    found[a.req.meta["report_id"]] = json.loads(d.evidence)

        def store_new(answers) -> None:
            keep(answers)
            with self.session(write=True) as s:
                q.put_cached_calls(s, cache_entries(cfg, answers))
                q.put_call_facts(s, labelling.call_facts(None, answers))
                q.put_call_replies(s, labelling.failed_replies(answers))

        def lookup(keys):
            with self.session() as s:
                return {k: c.response for k, c in q.cached_calls(s, keys).items()}

        counts = labelling.label_calls(requests, cfg, lookup, store_new, store_reused=keep, on_progress=on_progress)
        lex = self.labelset_lexicon()
        # in report order, whichever answers came from the cache: the same corpus gives the same candidates
        mentions = [m for rid, _ in reports if rid in found for m in ls.entity_mentions(rid, found[rid], lex)]
        calls = {
            "calls": counts.calls,
            "made": counts.made,
            "reused": counts.reused,
            "failed": counts.failed,
            "failure_kinds": dict(counts.failure_kinds),
            "cost": counts.cost,
            "prompt_tokens": counts.prompt_tokens,
            "completion_tokens": counts.completion_tokens,
        }
        return ls.candidates_from(mentions, lex, min_reports), calls

    # ------------------------------------------------------------ comparison

    def _label_words(self, against: str) -> list[ls.LabelWords]:
        """A vocabulary's labels with their look-for phrases: "study" (this study's, with its prompts) or a
        shipped/own vocabulary (with its shipped starter prompts when there are some)."""
        if against == "study":
            ps = self.prompts.prompt_set()
            return [
                ls.LabelWords(lab.id, lab.name, tuple(lab.look_for) + tuple(ps.label(lab.id).look_for))
                for lab in self.vocab.labels
                if not lab.derived
            ]
        try:
            vocab = load_vocabulary_file(find_vocabulary_file(against))
        except Exception as exc:  # a name that is no vocabulary: said plainly
            raise StudyError(f"--against {against!r}: {exc}") from exc
        from workbench.labeller.mining import prompt_look_for

        return [
            ls.LabelWords(lab.id, lab.name, tuple(lab.look_for) + prompt_look_for(PROMPTS_DIR / vocab.id, lab.id))
            for lab in vocab.labels
            if not lab.derived
        ]

    # ------------------------------------------------------------ review

    def set_review_rule(
        self, labelset: str, reviewers: list[str], rule: str = "unanimous", k: int = 0
    ) -> ls.ReviewRule:
        """Set who reviews a label set and how many must agree (admins)."""
        self.require("settings")
        try:
            parsed = ls.ReviewRule(tuple(dict.fromkeys(r.strip() for r in reviewers if r.strip())), rule, k)
        except ValueError as exc:
            raise StudyError(str(exc)) from exc
        with self.session(write=True) as s:
            self._require_labelset(s, labelset)
            store.put_rule(s, labelset, {"reviewers": list(parsed.reviewers), "rule": rule, "k": k}, self._me())
        return parsed

    def review_rule(self, labelset: str) -> ls.ReviewRule | None:
        """A label set's approval rule, or None before an admin set one."""
        with self.session() as s:
            raw = store.get_rule(s, labelset)
        return ls.ReviewRule(tuple(raw["reviewers"]), raw["rule"], raw.get("k", 0)) if raw else None

    def _me(self) -> str:
        """Who acts now."""
        return self.current_actor().user

    @staticmethod
    def _require_labelset(s, labelset: str) -> list:
        """The label set's candidates; StudyError when it has none."""
        rows = store.candidate_rows(s, labelset)
        if not rows:
            raise StudyError(f"no label set {labelset!r}: mine one with `workbench labelset mine --cohort C`")
        return rows

    def labelsets(self) -> list[str]:
        """Names of the study's label sets."""
        with self.session() as s:
            return store.labelset_names(s)

    def vote_candidate(
        self, labelset: str, key: str, action: str, argument: str = "", reviewer: str | None = None
    ) -> ls.Outcome:
        """Record one reviewer's vote on a candidate (approve, reject, merge ARG=target key, rename ARG=name)."""
        self.require("annotate")
        who = reviewer or self._me()
        actor = self.current_actor()
        if who != actor.user and actor.role not in ("admin", "adjudicator"):
            from workbench.services.study import PermissionDenied

            raise PermissionDenied(f"{actor.user} may only vote as themself, not as {who!r}")
        with self.session(write=True) as s:
            keys = {c.key for c in self._require_labelset(s, labelset)}
            if key not in keys:
                raise StudyError(f"no candidate {key!r} in label set {labelset!r}")
            try:
                action, argument = ls.check_vote(action, argument, keys, key)
            except ValueError as exc:
                raise StudyError(str(exc)) from exc
            store.put_vote(s, labelset, key, who, action, argument)
        return self.candidate_outcomes(labelset)[key]

    def candidate_outcomes(self, labelset: str) -> dict[str, ls.Outcome]:
        """key -> outcome under the label set's rule (every candidate open until a rule is set)."""
        rule = self.review_rule(labelset)
        with self.session() as s:
            rows = self._require_labelset(s, labelset)
            votes = store.vote_rows(s, labelset)
        by_key: dict[str, dict] = {}
        for v in votes:
            by_key.setdefault(v.key, {})[v.reviewer] = (v.action, v.argument)
        out = {}
        for c in rows:
            settled = tuple(json.loads(c.settled_json)["decision"]) if c.settled_json else None
            if rule is None:
                out[c.key] = (
                    ls.Outcome(ls.OPEN, settled, ()) if settled is None else ls.Outcome(ls.SETTLED, settled, (), True)
                )
            else:
                out[c.key] = ls.outcome(by_key.get(c.key, {}), rule, settled)
        return out

    def candidate_votes(self, labelset: str, key: str) -> dict[str, tuple[str, str]]:
        """Every reviewer's vote on a candidate, shown only to who has voted on it (or may see unblinded)."""
        with self.session() as s:
            cast = {v.reviewer: (v.action, v.argument) for v in store.vote_rows(s, labelset) if v.key == key}
        return cast if self._me() in cast or self._unblinded() else {}

    def _unblinded(self) -> bool:
        """Whether the actor sees every vote (adjudicators and admins, as with readings)."""
        return self.current_actor().role in ("adjudicator", "admin")

    def labelset_candidates(self, labelset: str) -> list[dict]:
        """The candidates in rank order with their evidence, current name/definition/look-for and outcome (the
        votes themselves are behind votes(), which blinds them)."""
        outcomes = self.candidate_outcomes(labelset)
        with self.session() as s:
            rows = self._require_labelset(s, labelset)
            voted = {v.key for v in store.vote_rows(s, labelset) if v.reviewer == self._me()}
        unblinded = self._unblinded()
        out = []
        for c in rows:
            ev = json.loads(c.evidence_json)
            o = outcomes[c.key]
            if not (unblinded or c.key in voted or o.status == ls.SETTLED):  # who agreed would hint at the votes
                o = dataclasses.replace(o, waiting_on=())
            ev.update(
                key=c.key,
                rank=c.rank,
                name=c.name,
                definition=c.definition,
                look_for=json.loads(c.look_for_json),
                status=o.status,
                decision=o.decision,
                waiting_on=list(o.waiting_on),
                adjudicated=o.adjudicated,
            )
            out.append(ev)
        return out

    def edit_candidate(
        self, labelset: str, key: str, definition: str | None = None, look_for: list[str] | None = None
    ) -> None:
        """Edit a candidate's definition or look-for phrases (audited with the old values)."""
        self.require("annotate")
        with self.session(write=True) as s:
            c = self._candidate(s, labelset, key)
            old = {"definition": c.definition, "look_for": json.loads(c.look_for_json)}
            if definition is not None:
                c.definition = definition.strip()
            if look_for is not None:
                cleaned = [p.strip() for p in look_for if p and p.strip()]
                if not cleaned:
                    raise StudyError("look-for needs at least one phrase")
                c.look_for_json = json.dumps(cleaned)
            s.add(c)
            new = {"definition": c.definition, "look_for": json.loads(c.look_for_json)}
            q.add_audit(s, self._me(), "edit", "labelset_candidate", f"{labelset}/{key}", old, new)

    def _candidate(self, s, labelset: str, key: str):
        """One stored candidate; StudyError naming it when there is none."""
        c = store.get_candidate(s, labelset, key)
        if c is None:
            raise StudyError(f"no candidate {key!r} in label set {labelset!r}")
        return c

    def split_candidate(self, labelset: str, key: str, forms: list[str], name: str) -> str:
        """Move some surface forms of a candidate into a new candidate of their own (open for review)."""
        self.require("annotate")
        with self.session(write=True) as s:
            rows = self._require_labelset(s, labelset)
            c = self._candidate(s, labelset, key)
            ev = json.loads(c.evidence_json)
            have = {f["text"] for f in ev["forms"]}
            unknown = [f for f in forms if f not in have]
            if unknown or not forms:
                raise StudyError(f"forms not in {key!r}: {', '.join(unknown) or 'none given'}")
            if len(forms) == len(have):
                raise StudyError("a split must leave the candidate at least one form")
            new_key = f"{key}/{ls.label_id(name)}"
            if new_key in {r.key for r in rows}:
                raise StudyError(f"candidate {new_key!r} exists already")
            moved = [f for f in ev["forms"] if f["text"] in forms]
            ev["forms"] = [f for f in ev["forms"] if f["text"] not in forms]
            c.evidence_json = json.dumps(ev, ensure_ascii=False)
            s.add(c)
            row = {**ev, "key": new_key, "name": name.strip(), "forms": moved, "look_for": [f["text"] for f in moved]}
            row["definition"] = f"The report describes {name.strip()}."
            store.add_candidate(s, labelset, row, max(r.rank for r in rows) + 1)
            q.add_audit(
                s,
                self._me(),
                "split",
                "labelset_candidate",
                f"{labelset}/{key}",
                None,
                {"into": new_key, "forms": forms},
            )
        return new_key

    def settle_candidate(
        self, labelset: str, key: str, action: str, argument: str = "", reason: str = ""
    ) -> ls.Outcome:
        """An adjudicator's (or admin's) decision on a contested candidate; it wins over the votes."""
        self.require("adjudicate")
        with self.session(write=True) as s:
            keys = {c.key for c in self._require_labelset(s, labelset)}
            c = self._candidate(s, labelset, key)
            try:
                decision = ls.check_vote(action, argument, keys, key)
            except ValueError as exc:
                raise StudyError(str(exc)) from exc
            old = json.loads(c.settled_json) if c.settled_json else None
            c.settled_json = json.dumps({"decision": list(decision), "by": self._me(), "reason": reason})
            s.add(c)
            q.add_audit(
                s, self._me(), "settle", "labelset_candidate", f"{labelset}/{key}", old, json.loads(c.settled_json)
            )
        return self.candidate_outcomes(labelset)[key]

    # ------------------------------------------------------------ adoption

    def _approved_vocabulary(self, labelset: str, vocab_id: str | None = None) -> dict:
        """The approved label set as a vocabulary document (refused while a candidate is still open)."""
        rows = self.labelset_candidates(labelset)
        still = [c for c in rows if c["status"] == ls.OPEN]
        if self.review_rule(labelset) is None:
            raise StudyError(f"label set {labelset!r} has no approval rule yet: `workbench labelset rule` (admins)")
        if still:
            names = ", ".join(f"{c['name']} (waiting on {', '.join(c['waiting_on']) or 'a rule'})" for c in still[:10])
            raise StudyError(f"{len(still)} candidate(s) still open: {names}")
        labels = ls.approved_labels(rows)
        if not labels:
            raise StudyError("no candidate was approved: nothing to adopt")
        vid = vocab_id or f"labelset-{ls.label_id(labelset).replace('_', '-')}"
        return ls.vocabulary_document(vid, f"Label set {labelset}", labels, f"workbench labelset, cohort {labelset}")

    def adopt_labelset(self, labelset: str, message: str = "") -> ls.VocabularyChange:
        """Make the approved label set the study's vocabulary: the file committed beside the prompts with a
        starter prompt per new label; dropped labels' prompts leave the current version (their readings, runs
        and old prompt versions are kept)."""
        self.require("settings")
        doc = self._approved_vocabulary(labelset)
        labels = [lab for lab in doc["labels"] if not lab.get("derived")]
        merges = [
            (c["name"], c["decision"][1])
            for c in self.labelset_candidates(labelset)
            if c["decision"] and c["decision"][0] == "merge"
        ]
        old = [(lab.id, lab.name) for lab in self.vocab.labels]
        names = {n.lower(): n for _, n in old}
        for lab in labels:  # a name that differs only in case keeps the vocabulary's own (files exchanged line up)
            lab["name"] = names.get(lab["name"].lower(), lab["name"])
        change = ls.vocabulary_change(old, labels, merges)
        renamed_ids = {lab["id"]: self.vocab.resolve(lab["name"]) or lab["id"] for lab in labels}
        for lab in labels:  # a label that keeps its name keeps its id (and so its readings and runs)
            lab["id"] = renamed_ids[lab["id"]]
        text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
        load_check = load_yaml(text)
        from workbench.core.vocab import parse_vocabulary

        parse_vocabulary(load_check)  # the file must be one the study can open
        files = {VOCAB_IN_REPO: text}
        current = self.prompts.prompt_files()
        for lab in labels:
            if f"{lab['id']}.yaml" not in current:
                files[f"{lab['id']}.yaml"] = yaml.safe_dump(ls.starter_prompt(lab), sort_keys=False, allow_unicode=True)
        task = load_yaml(current["_task.yaml"])
        trimmed = ls.trim_attribute_cues(task, {a for lab in labels for a in lab.get("attributes", [])})
        if trimmed != task:
            files["_task.yaml"] = yaml.safe_dump(trimmed, sort_keys=False, allow_unicode=True)
        keep = {f"{lab['id']}.yaml" for lab in labels} | {"_task.yaml"}
        remove = [n for n in current if n.endswith(".yaml") and "/" not in n and n not in keep]
        summary = "; ".join(change.lines())
        prompt_repo.commit_files(
            self.paths.prompts,
            files,
            message or f"Adopt label set {labelset}: {summary}",
            self.current_actor().identity(),
            None,
            remove=remove,
        )
        vocab_path = self.root / VOCAB_FILE
        backup = self.root / f"vocabulary.before-{labelset}.yaml"
        if vocab_path.exists() and not backup.exists():
            shutil.copyfile(vocab_path, backup)
        vocab_path.write_text(text, encoding="utf-8")
        self.ctx.vocab = load_vocabulary_file(vocab_path)
        with self.session(write=True) as s:
            q.add_audit(
                s,
                self._me(),
                "adopt",
                "labelset",
                labelset,
                {"labels": [i for i, _ in old]},
                {"labels": [lab["id"] for lab in labels], "change": change.lines()},
            )
        return change

    def export_labelset(self, labelset: str, path: Path) -> Path:
        """Write the approved label set as a vocabulary file (for `workbench init --vocab FILE`)."""
        doc = self._approved_vocabulary(labelset)
        path = Path(path)
        path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), encoding="utf-8")
        return path
