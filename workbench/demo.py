"""The embedded demo study: synthetic reports read by six simulated readers, offline labeller.

It lets a newcomer see the whole loop on first start without an API key or network.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path

from workbench.services import Actor, Workbench, init_study
from workbench.shipped import shipped_dir

ANNOTATIONS = shipped_dir("annotations")


def create_demo(root: Path, reset: bool = False, echo: Callable[[str], None] = print, run: bool = True):
    """Create (or open) the demo study at root; returns its Workbench."""
    root = Path(root).resolve()
    if reset and root.exists():
        shutil.rmtree(root)
    if (root / "workbench.yaml").exists():
        wb = Workbench(root)
        wb.migrate()
        return wb
    wb = init_study(root, vocab="ranscore-21", rule={"rule": "at_least", "k": 4, "n": 6}, name="demo")
    echo(wb.import_reports(ANNOTATIONS / "demo" / "reports.csv", "dev", "en").message())
    echo(wb.import_readings(ANNOTATIONS / "demo" / "readings.csv").message())
    zh = ANNOTATIONS / "demo-zh"
    if (zh / "reports.csv").exists():
        echo(wb.import_reports(zh / "reports.csv", "external-zh", "zh").message())
        echo(wb.import_readings(zh / "readings.csv").message())
    if run:
        summary = wb.start_run(cohort="dev")
        echo(f"offline labeller, starter prompts: {summary.message()}")
        commit = iterate_once(wb)
        summary = wb.start_run(cohort="dev")
        echo(f"offline labeller, prompt version {commit[:8]} (iteration 2): {summary.message()}")
    return wb


# A first revision as a prompt engineer would make it from the first run's disagreements, so the
# demo opens with an iteration history and a comparison to look at; the rest is left to the user.
ITERATION_2 = {
    "support_devices": ["ETT", "NG tube", "nasogastric tube", "PICC", "tracheostomy tube", "enteric tube", "ICD"],
    "lung_opacity": ["consolidation", "atelectasis", "air-space disease", "airspace opacity", "air-space opacity"],
}


def iterate_once(wb) -> str:
    """Commit the demo's second prompt version (look-for phrases found in the disagreements)."""
    engineer = wb.as_actor(Actor("demo-engineer", "prompt_engineer", "Demo prompt engineer", "engineer@demo.invalid"))
    edited = []
    for label, phrases in ITERATION_2.items():
        lp = wb.label_prompt(label)
        edited.append(dataclasses.replace(lp, look_for=lp.look_for + tuple(p for p in phrases if p not in lp.look_for)))
    return engineer.save_prompts(
        edited,
        "Iteration 2: device abbreviations (ETT, NG tube, PICC); opacity includes consolidation and atelectasis",
        wb.prompt_commit(),
    )
