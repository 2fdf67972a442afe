"""Issue 34: bounded input. Every imported text column, file shape and YAML file is checked before it can cost
memory, time or a bare database error."""

from __future__ import annotations

import json

import pytest

from workbench.errors import WorkbenchError
from workbench.importers import MAX_COLUMNS, MAX_LINE_CHARS, ImportProblems, read_reports, read_table


def problems_of(call) -> list[str]:
    """Run call, expect ImportProblems, return its problems as described lines."""
    with pytest.raises(ImportProblems) as info:
        call()
    return [p.describe(info.value.source) for p in info.value.problems]


# ---------------------------------------------------------------------------------------------
# item 1: every imported text column gets the report text's control-character rule


@pytest.mark.parametrize("bad", ["\x00", "\x1b[2J", "\x07"])
def test_control_characters_in_language_are_refused_naming_row_and_column(tmp_path, bad):
    path = tmp_path / "reports.csv"
    path.write_text(f"id,text,language\nr1,No effusion.,en\nr2,Clear lungs.,e{bad}n\n", encoding="utf-8")
    lines = problems_of(lambda: read_reports(path))
    assert len(lines) == 1, lines
    assert "row 3, column 'language'" in lines[0] and "the language column contains U+00" in lines[0], lines


def test_control_characters_in_openi_extra_columns_are_refused(tmp_path):
    from workbench.importers import read_openi

    reports = tmp_path / "reports.csv"
    reports.write_text("uid,findings,impression,indication\n1,Clear.,Normal.,cough\x1b]8;;http://x\x07\n")
    labels = tmp_path / "labels.csv"
    labels.write_text("uid,MeSH\n1,normal\n")
    lines = problems_of(lambda: read_openi(reports, labels))
    assert any("column 'indication'" in line and "U+001B" in line for line in lines), lines


def test_clean_language_column_still_imports(tmp_path):
    path = tmp_path / "reports.csv"
    path.write_text("id,text,language\nr1,No effusion.\tok,en\n", encoding="utf-8")
    assert read_reports(path)["language"].tolist() == ["en"]


def test_study_import_with_esc_in_language_stores_nothing(study, tmp_path):
    path = tmp_path / "reports.csv"
    path.write_text("id,text,language\nr1,No effusion.,\x1b[31mzh\n", encoding="utf-8")
    with pytest.raises(ImportProblems, match="column 'language'"):
        study.import_reports(path, "dev")
    assert study.cohorts().empty


# ---------------------------------------------------------------------------------------------
# item 4: columns, cell size and line length bounded before any parser builds a table


def test_a_million_columns_csv_is_refused_with_the_limit_named(tmp_path):
    path = tmp_path / "wide.csv"
    header = ",".join(f"c{i}" for i in range(1_000_000))
    path.write_text(header + "\n" + ",".join("1" for _ in range(1_000_000)) + "\n")
    lines = problems_of(lambda: read_table(path))
    assert len(lines) == 1 and f"{MAX_LINE_CHARS:,} allowed per line" in lines[0], lines


def test_many_columns_on_short_lines_are_refused_with_the_limit_named(tmp_path):
    path = tmp_path / "wide.tsv"
    path.write_text("\t".join(f"c{i}" for i in range(MAX_COLUMNS + 1)) + "\n" + "\t".join("1" * (MAX_COLUMNS + 1)))
    lines = problems_of(lambda: read_table(path))
    assert lines == [
        f"wide.tsv: the file has {MAX_COLUMNS + 1:,} columns, more than the {MAX_COLUMNS:,} allowed; "
        "is this the right file?"
    ]


def test_jsonl_with_many_distinct_keys_is_refused_before_a_table_is_built(tmp_path):
    path = tmp_path / "keys.jsonl"
    with path.open("w") as out:
        for line in range(200):
            out.write(json.dumps({f"k{line}_{i}": 1 for i in range(50)}) + "\n")
    lines = problems_of(lambda: read_table(path))
    assert len(lines) == 1 and f"more than the {MAX_COLUMNS:,} allowed" in lines[0], lines


def test_one_huge_jsonl_line_is_refused_naming_the_line(tmp_path):
    path = tmp_path / "big.jsonl"
    path.write_text('{"id": "a", "text": "x"}\n' + json.dumps({"id": "b", "text": "y" * (MAX_LINE_CHARS + 1)}) + "\n")
    lines = problems_of(lambda: read_table(path))
    assert len(lines) == 1 and lines[0].startswith("big.jsonl: line 2 has 4,000,0"), lines


def test_a_broken_quote_swallowing_the_file_is_refused_as_one_big_cell(tmp_path):
    path = tmp_path / "reports.csv"
    body = "".join(f"r{i},{'text ' * 100}\n" for i in range(5_000))
    # the quote opened on row 2 closes only at the end: one cell holds the rest of the file
    path.write_text('id,text\nr0,"opened too early\n' + body + '"\n')
    lines = problems_of(lambda: read_table(path))
    assert len(lines) == 1 and "row 2, column 'text': cell has" in lines[0] and "2,000,000 allowed" in lines[0], lines


def test_parquet_with_too_many_columns_is_refused(tmp_path):
    import pandas as pd

    path = tmp_path / "wide.parquet"
    pd.DataFrame({f"c{i}": ["1"] for i in range(MAX_COLUMNS + 1)}).to_parquet(path)
    lines = problems_of(lambda: read_table(path))
    assert len(lines) == 1 and f"{MAX_COLUMNS + 1:,} columns" in lines[0], lines


def test_a_file_at_the_limits_still_reads(tmp_path):
    path = tmp_path / "ok.csv"
    path.write_text(",".join(f"c{i}" for i in range(MAX_COLUMNS)) + "\n" + ",".join("1" * MAX_COLUMNS) + "\n")
    assert read_table(path).shape == (1, MAX_COLUMNS)


# ---------------------------------------------------------------------------------------------
# item 3: every YAML the workbench reads is parsed with alias expansion and nesting bounded


def alias_bomb(levels: int = 9) -> str:
    """A few hundred bytes whose aliases expand to 9**levels nodes (the 'billion laughs')."""
    text = 'l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    for level in range(1, levels):
        text += f"l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 9)}]\n"
    return text


def test_alias_bomb_is_refused_by_the_loader():
    from workbench.core.yaml_text import YamlTooLarge, load_yaml

    with pytest.raises(YamlTooLarge, match=r"expand to 490,329,064 nodes .* at most 100,000 more"):
        load_yaml(alias_bomb())


def test_self_containing_alias_and_deep_nesting_are_refused():
    from workbench.core.yaml_text import YamlTooLarge, load_yaml

    with pytest.raises(YamlTooLarge, match="contains it"):
        load_yaml("a: &a [1, {b: *a}]\n")
    deep = "".join(" " * i + "- \n" for i in range(150)) + " " * 150 + "- x\n"
    with pytest.raises(YamlTooLarge, match="nested more than 100 levels deep"):
        load_yaml(deep)


def test_ordinary_aliases_still_load():
    from workbench.core.yaml_text import load_yaml

    assert load_yaml("base: &b {model: m, temperature: 0}\nrun: *b\n") == {
        "base": {"model": "m", "temperature": 0},
        "run": {"model": "m", "temperature": 0},
    }


def test_alias_bomb_in_workbench_yaml_is_a_one_line_error(study):
    from click.testing import CliRunner

    from workbench.cli import main

    config = study.root / "workbench.yaml"
    config.write_text(config.read_text() + alias_bomb())
    result = CliRunner().invoke(main, ["reference", "--study", str(study.root)])
    assert result.exit_code == 2, result.output
    assert "workbench.yaml: not valid YAML" in result.output and "alias bomb" in result.output, result.output


def test_alias_bomb_in_a_vocabulary_file_is_refused(tmp_path):
    from workbench.study import StudyError, load_vocabulary_file

    path = tmp_path / "vocab.yaml"
    path.write_text("id: v\nname: V\nlabels: []\n" + alias_bomb())
    with pytest.raises(StudyError, match="alias bomb"):
        load_vocabulary_file(path)


def test_alias_bomb_in_a_prompt_file_is_refused(study):
    from workbench.services.prompting import parse_label_yaml
    from workbench.store.prompt_repo import read_files

    name, text = next((n, t) for n, t in read_files(study.paths.prompts).items() if "task" not in n)
    with pytest.raises(WorkbenchError, match=f"{name}: not valid YAML .*alias bomb"):
        parse_label_yaml(text + alias_bomb(), name)


def test_alias_bomb_in_a_prompt_dictionary_is_refused(tmp_path):
    from workbench.importers import read_prompt_dictionary

    path = tmp_path / "guidance.yaml"
    path.write_text("effusion: fluid\n" + alias_bomb())
    lines = problems_of(lambda: read_prompt_dictionary(path))
    assert len(lines) == 1 and "not valid YAML" in lines[0] and "alias bomb" in lines[0], lines


# ---------------------------------------------------------------------------------------------
# item 10: a reply over the size limit is a failure of its own kind; what is kept of it is bounded


def _reply_bytes_stored(wb) -> int:
    """Characters of model text the study's database holds (raw replies, cached answers, errors, evidence)."""
    import sqlite3

    db = sqlite3.connect(wb.root / "workbench.db")
    try:
        total = 0
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'"):
            cols = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
            for col in cols:
                query = f'SELECT COALESCE(SUM(LENGTH(CAST("{col}" AS BLOB))), 0) FROM "{table}"'
                total += db.execute(query).fetchone()[0]
        return total
    finally:
        db.close()


@pytest.mark.parametrize("settings", [{}, {"max_reply_chars": 5_000}], ids=["default-limit", "study-setting"])
def test_oversized_replies_are_failures_of_their_own_kind_and_not_stored(small_study, settings):
    from fake_llm_server import running_server

    from workbench.labeller.llm import MAX_REPLY_CHARS

    limit = settings.get("max_reply_chars", MAX_REPLY_CHARS)
    before = _reply_bytes_stored(small_study)
    with running_server() as server:
        server.reply = json.dumps({"value": 1, "evidence": "x" * (limit + 1)})
        run = small_study.start_run(
            "dev",
            model="openai/fake",
            api_base=server.url,
            labels=["pneumothorax"],
            max_retries=0,
            timeout_s=60,
            **settings,
        )
    assert run.failure_kinds == {"oversized": 8}, run.failure_kinds
    assert f"over the {limit:,} allowed (labeller.max_reply_chars)" in run.failure_examples["oversized"]
    assert small_study.predictions(run.run_id)["value"].isna().all()
    assert _reply_bytes_stored(small_study) - before < 8 * 5_000  # each call keeps a bounded message, not the reply


def test_a_reply_within_the_limit_is_kept_whole(small_study):
    from fake_llm_server import running_server

    with running_server() as server:
        server.reply = json.dumps({"value": 1, "evidence": "y" * 4_000})
        run = small_study.start_run(
            "dev",
            model="openai/fake",
            api_base=server.url,
            labels=["pneumothorax"],
            max_retries=0,
            max_reply_chars=5_000,
        )
    assert run.failures == 0 and run.failure_kinds == {}


def test_max_reply_chars_must_be_a_positive_whole_number():
    from workbench.errors import UserError
    from workbench.labeller.llm import ModelConfig

    with pytest.raises(UserError, match="max_reply_chars must be a whole number >= 1, got 0"):
        ModelConfig("openai/x", max_reply_chars=0)


# ---------------------------------------------------------------------------------------------
# item 13 (part): auth values are checked; an allowed entry without a scheme is no wildcard


@pytest.mark.parametrize("value", ["NONE", "None", "local ", "ldap"])
def test_an_unknown_auth_value_is_refused(study, value):
    from workbench.study import StudyError, load_config

    config = study.root / "workbench.yaml"
    config.write_text(config.read_text().replace("auth: none", f"auth: {value!r}"))
    with pytest.raises(StudyError, match=f"auth must be one of none, local, oidc, got {value!r}"):
        load_config(study.root)


@pytest.mark.parametrize("entry", ["h", "http", "127.0.0.1", "http://"])
def test_allow_endpoint_refuses_an_entry_that_is_not_an_endpoint(study, entry):
    from workbench.study import StudyError

    with pytest.raises(StudyError, match="is not an endpoint"):
        study.allow_endpoint(entry)
    assert entry not in study.config.allowed_endpoints


def test_an_entry_without_a_scheme_matches_no_url():
    from workbench.labeller.endpoints import may_send, url_allowed

    assert not url_allowed("h", "http://10.1.2.3/v1") and not url_allowed("h", "https://evil.example")
    assert not may_send(["h"], ["http://10.1.2.3/v1"])
    assert url_allowed("workbench/rules", "workbench/rules") and not url_allowed("workbench/rules", "workbench/rulesx")


@pytest.mark.parametrize("template", ["Report: {report:>200000000}", "{report!r}", "{report} for {label:{report}}"])
def test_a_template_placeholder_with_a_format_spec_is_refused_as_the_users_error(template):
    from workbench.core.prompts import PromptError, check_template

    with pytest.raises(PromptError, match="has a format spec or conversion; write it plainly"):
        check_template(template, {"report", "label"}, "_task.yaml: template")


def test_a_bare_carriage_return_inside_a_field_does_not_split_a_report_silently(tmp_path):
    path = tmp_path / "reports.csv"
    path.write_bytes(b"id,text\nr1,No effusion.\rr9,Clear lungs.\nr2,Normal heart.\n")
    lines = problems_of(lambda: read_reports(path))
    assert lines == [
        "reports.csv row 2: a carriage return alone inside a field would split this row in two; remove it or "
        "quote the field (the row number is the file's line)"
    ]


def test_carriage_returns_inside_quotes_and_old_mac_line_ends_still_read(tmp_path):
    quoted = tmp_path / "quoted.csv"
    quoted.write_bytes(b'id,text\nr1,"one\rtwo"\nr2,"a ""quote""\rthen"\n')
    assert read_reports(quoted)["text"].tolist() == ["one\rtwo", 'a "quote"\rthen']
    mac = tmp_path / "mac.csv"
    mac.write_bytes(b"id,text\rr1,one\rr2,two\r")
    assert read_reports(mac)["report_id"].tolist() == ["r1", "r2"]


@pytest.mark.parametrize(
    "char, name",
    [("\u00a0", "NO-BREAK SPACE"), ("\u034f", "COMBINING GRAPHEME JOINER"), ("\ufe0f", "VARIATION SELECTOR-16")],
)
def test_look_alike_characters_in_ids_and_cohort_names_are_refused(tmp_path, char, name):
    from workbench.core.names import check_cohort_name
    from workbench.errors import UserError

    path = tmp_path / "reports.csv"
    path.write_text(f"id,text\nr1,No effusion.\nr{char}1,Clear lungs.\n", encoding="utf-8")
    lines = problems_of(lambda: read_reports(path))
    assert len(lines) == 1 and "row 3, column 'id'" in lines[0] and name in lines[0], lines
    with pytest.raises(UserError, match=name):
        check_cohort_name(f"dev{char}")


def test_a_formula_after_a_semicolon_is_defused_in_written_csv(tmp_path):
    import pandas as pd

    from workbench.core.export import to_csv

    path = tmp_path / "out.csv"
    to_csv(
        pd.DataFrame({"evidence": ['effusion;=HYPERLINK("http://attacker.example","x")', "a;\t@SUM(1)", "ok; fine"]}),
        path,
    )
    cells = [line.split(";") for line in path.read_text().splitlines()[1:]]
    # opened by a spreadsheet that splits on semicolons, no cell starts with a formula character
    for row in cells:
        for cell in row:
            assert not cell.strip().lstrip('"').startswith(("=", "+", "-", "@")), cells
    assert cells[2] == ["ok", " fine"]
