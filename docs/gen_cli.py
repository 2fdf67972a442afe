#!/usr/bin/env python3
"""Write docs/cli.md, the command-line reference, from the Click commands themselves.

Run `python docs/gen_cli.py` after changing a command or an option; tests/test_docs.py fails while
docs/cli.md differs from what this script writes, so the reference cannot miss a command or option.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import click

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

HEADER = """# Command-line reference

Generated from the commands by `python docs/gen_cli.py`; do not edit by hand. Every command also
has `--help`. Commands that work on a study take `--study PATH` (default `$WORKBENCH_STUDY`, else
the current folder); it is listed once here, not under each command. Commands are grouped by
workflow, as `workbench --help` lists them; names used before (`note`, `notes`, `readings notes`,
`test-looks`) still work and are not listed.

"""


def _option_line(param: click.Parameter) -> str:
    """One Markdown list item for an option: its flags, its choices or type, its default and its help."""
    flags = ", ".join(f"`{f}`" for f in [*param.opts, *param.secondary_opts])
    kind = ""
    if isinstance(param.type, click.Choice):
        kind = " (" + " \\| ".join(str(c) for c in param.type.choices) + ")"
    elif not getattr(param, "is_flag", False) and param.type.name not in ("text", "boolean"):
        kind = f" ({param.type.name.lower()})"
    default = ""
    if getattr(param, "show_default", False) and param.default not in (None, (), False):
        shown = str(param.default).replace(str(HERE.parent) + "/", "")  # a path in the checkout, said relative to it
        default = f" Default: `{shown}`."
    text = " ".join((getattr(param, "help", None) or "").split())
    return f"- {flags}{kind}: {text}{default}".rstrip(": ").rstrip()


def _usage(cmd: click.Command, path: list[str]) -> str:
    """`workbench a b ARG1 [ARG2]...` with the command's arguments."""
    args = []
    for p in cmd.params:
        if isinstance(p, click.Argument):
            name = p.human_readable_name
            name = f"{name}..." if p.nargs == -1 else name
            args.append(name if p.required else f"[{name}]")
    return " ".join(["workbench", *path, *args, "[OPTIONS]" if _options(cmd) else ""]).strip()


def _options(cmd: click.Command) -> list[click.Option]:
    """A command's documented options (--study and --help are said once for all)."""
    return [p for p in cmd.params if isinstance(p, click.Option) and p.name not in ("study", "help") and not p.hidden]


def _command_section(cmd: click.Command, path: list[str]) -> list[str]:
    """The Markdown of one leaf command."""
    help_text = inspect.cleandoc((cmd.help or "").split("\f")[0])
    lines = [f"### `workbench {' '.join(path)}`", "", "```", _usage(cmd, path), "```", ""]
    lines += [help_text, ""] if help_text else []
    opts = _options(cmd)
    if opts:
        lines += [_option_line(o) for o in opts] + [""]
    return lines


def _walk(group: click.Group, path: list[str]):
    """(path, command) for every leaf command, in alphabetical order."""
    for name in sorted(group.commands):
        cmd = group.commands[name]
        if cmd.hidden:
            continue
        if isinstance(cmd, click.Group):
            yield from _walk(cmd, [*path, name])
        else:
            yield [*path, name], cmd


def _sections(group: click.Group):
    """(title, [(path, command), ...]) in the order of `workbench --help` (workbench.cli.SECTIONS)."""
    from workbench.cli import SECTIONS

    placed = [n for names in SECTIONS.values() for n in names]
    rest = [n for n in sorted(group.commands) if n not in placed and not group.commands[n].hidden]
    for title, names in [*SECTIONS.items(), ("Other", rest)]:
        leaves = []
        for name in names:
            cmd = group.commands[name]
            leaves += list(_walk(cmd, [name])) if isinstance(cmd, click.Group) else [([name], cmd)]
        if leaves:
            yield title, leaves


def render() -> str:
    """The whole reference: an index table per workflow section, then one section per command."""
    from workbench.cli import main

    sections = list(_sections(main))
    out = [HEADER.rstrip("\n"), ""]
    for title, leaves in sections:
        out += [f"**{title}**", "", "| command | what it does |", "|---|---|"]
        for path, cmd in leaves:
            summary = " ".join(cmd.get_short_help_str(limit=120).split()).replace("|", "\\|")
            anchor = "workbench-" + "-".join(path).replace("_", "-")
            out.append(f"| [`workbench {' '.join(path)}`](#{anchor}) | {summary} |")
        out.append("")
    for title, leaves in sections:
        out += [f"## {title}", ""]
        for path, cmd in leaves:
            out += _command_section(cmd, path)
    return "\n".join(out).rstrip() + "\n"


def main() -> int:
    """Write docs/cli.md (or with --check, exit 1 when it differs)."""
    text = render()
    target = HERE / "cli.md"
    if "--check" in sys.argv[1:]:
        same = target.exists() and target.read_text(encoding="utf-8") == text
        print("docs/cli.md is up to date" if same else "docs/cli.md differs: run python docs/gen_cli.py")
        return 0 if same else 1
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
