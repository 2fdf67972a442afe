"""The embedded demo study: synthetic reports read by six simulated readers, offline labeller.

It lets a newcomer see the whole loop on first start without an API key or network.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

from workbench.study import PROJECT_ROOT

ANNOTATIONS = PROJECT_ROOT / "annotations"


def create_demo(root: Path, reset: bool = False, echo: Callable[[str], None] = print, run: bool = True):
    """Create (or open) the demo study at root; returns its Workbench."""
    from workbench.services import Workbench, init_study

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
    if run and hasattr(wb, "start_run"):
        summary = wb.start_run(cohort="dev")
        echo(f"offline labeller run {summary.run_id}: {summary.message()}")
    return wb
