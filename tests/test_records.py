"""Your own records (``python -m runners capture --records``): CSV with a header read by column name, header-less
CSV (``dbpedia``) whose first row may not look like a header, JSONL, and Hugging Face ``datasets`` folders,
Parquet and Arrow files -- the same records in every form read alike and capture to identical runs.

The records are written by the test itself (:data:`RECORDS`); the captures use a tiny random-weight BERT
from tests/tiny_models.py (no download) through the CLI in-process (``runners.__main__.main``)."""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from routestats.errors import RoutestatsError
from runners.corpora import Record

ROOT = Path(__file__).resolve().parents[1]

# (label, title, content): four records; a label is not a whole number and every title and content holds a
# space, so none of them looks like a header row (docstring of runners.pretrained.records._header_like)
RECORDS = [("q1", "numpy isin", "Calculates element in test elements, broadcasting over element only."),
           ("q2", "scipy romb", "Romberg integration using samples of a function."),
           ("q3", "pandas merge", "Merge DataFrame or named Series objects with a database-style join."),
           ("q4", "numpy minimum", "Element-wise minimum of array elements.")]
EXPECTED = [Record(label=lab, fields=(("title", t), ("content", c))) for lab, t, c in RECORDS]


def read_records(*args, **kw):
    from runners.pretrained.records import read_records as read

    return read(*args, **kw)


def csv_text(rows) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def columns(label_key: str = "id") -> dict:
    return {label_key: [r[0] for r in RECORDS], "title": [r[1] for r in RECORDS], "content": [r[2] for r in RECORDS]}


def write_forms(folder: Path) -> dict[str, tuple[Path, list[str]]]:
    """The records in every form: name -> (path, the CLI options that read them as EXPECTED). The label column is
    ``id`` (named with --label) in some forms and ``label`` (the default) in others; some formats are named,
    others taken from the path."""
    folder.mkdir(parents=True, exist_ok=True)
    forms = {}
    (folder / "header.csv").write_text(csv_text([("id", "title", "content"), *RECORDS]))
    forms["csv"] = (folder / "header.csv", ["--format", "csv", "--label", "id"])
    (folder / "noheader.csv").write_text(csv_text(RECORDS))
    forms["dbpedia"] = (folder / "noheader.csv", ["--format", "dbpedia"])
    with open(folder / "records.jsonl", "w") as fh:
        for lab, t, c in RECORDS:
            fh.write(json.dumps({"label": lab, "title": t, "content": c}) + "\n")
    forms["jsonl"] = (folder / "records.jsonl", [])  # format by the suffix, label by the key "label"
    pq.write_table(pa.table(columns("id")), folder / "records.parquet")
    forms["parquet"] = (folder / "records.parquet", ["--label", "id"])
    with pa.ipc.new_file(folder / "records.arrow", pa.table(columns("id")).schema) as w:  # the IPC file format
        w.write_table(pa.table(columns("id")))
    forms["arrow"] = (folder / "records.arrow", ["--format", "datasets", "--label", "id"])
    try:
        import datasets
    except ImportError:  # CI installs .[train,capture,dev]: the datasets folder is tested where datasets is installed
        return forms
    datasets.disable_progress_bars()
    datasets.Dataset.from_dict(columns("label")).save_to_disk(folder / "dataset")
    forms["datasets"] = (folder / "dataset", [])  # a folder: --format datasets by the path
    return forms


def cli_kwargs(options: list[str]) -> dict:
    """The read_records keywords the CLI options of :func:`write_forms` stand for."""
    opts = dict(zip(options[::2], options[1::2]))
    return {"fmt": opts.get("--format"), "label": opts.get("--label")}


# ------------------------------------------------------------------ reading
def test_the_same_records_read_alike_in_every_form(tmp_path):
    forms = write_forms(tmp_path)
    assert {"csv", "dbpedia", "jsonl", "parquet", "arrow"} <= set(forms)
    for name, (path, options) in forms.items():
        kw = cli_kwargs(options)
        assert read_records(path, kw["fmt"], ["title", "content"], label=kw["label"]) == EXPECTED, name
        # --limit 2: the first two (of the 4 written)
        assert read_records(path, kw["fmt"], ["title", "content"], 2, label=kw["label"]) == EXPECTED[:2], name
        # --fields content,title: the fields in that order
        if name != "dbpedia":  # dbpedia records hold (title, content) by position; capture orders them by --fields
            swapped = read_records(path, kw["fmt"], ["content", "title"], label=kw["label"])
            assert [r.fields for r in swapped] == [(r.fields[1], r.fields[0]) for r in EXPECTED], name


def test_an_arrow_stream_as_save_to_disk_writes_it_reads_too(tmp_path):
    table = pa.table(columns("id"))
    with pa.ipc.new_stream(tmp_path / "s.arrow", table.schema) as w:
        for batch in table.to_batches(max_chunksize=1):  # one row a batch: the limit stops after two batches
            w.write_batch(batch)
    assert read_records(tmp_path / "s.arrow", None, ["title", "content"], 2, label="id") == EXPECTED[:2]


@pytest.mark.parametrize("first_row, fields, why", [
    ("id,question,answer", ["question", "answer"], "rule 1: every --fields name is a cell"),
    ("id,title,content", ["title", "content"], "rule 1, with the default fields"),
    ("id,question,answer", ["title", "content"], "rule 2: names above rows of text"),
    (",question,answer", ["title", "content"], "rule 2: pandas' unnamed index column is an empty cell"),
    ("ID,Question text,Answer text", ["title", "content"], "rule 3: a word above whole-number labels"),
])
def test_a_header_read_as_headerless_csv_is_refused(tmp_path, first_row, fields, why):
    f = tmp_path / "my.csv"
    rows = [(str(i + 1), t, c) for i, (_, t, c) in enumerate(RECORDS)]  # labels 1..4: whole numbers, as DBpedia's
    f.write_text(first_row + "\n" + csv_text(rows))
    for fmt in ("dbpedia", None):  # declared, and by the path (a .csv file is dbpedia unless --format says)
        with pytest.raises(RoutestatsError) as exc:
            read_records(f, fmt, fields)
        assert str(exc.value) == (f"{f}: its first row looks like a header ({first_row}); pass --format csv to read "
                                  "columns by name, or remove the row"), why


def test_a_spreadsheet_header_above_text_is_refused_whatever_the_labels(tmp_path):
    # issue [first-hour] 3: "Question ID,Question text,Answer text" (names with spaces) above labels q1..q4 was read
    # as record 0 (label "Question ID") into every statistic; rule 4 of _header_like: short phrases of names above
    # a column whose cells hold at the median at least 6 words (here 9) and three times the header's (2)
    f = tmp_path / "sheet.csv"
    f.write_text("Question ID,Question text,Answer text\n" + csv_text(RECORDS))
    with pytest.raises(RoutestatsError) as exc:
        read_records(f, None, ["title", "content"])
    assert str(exc.value).startswith(f"{f}: its first row looks like a header (Question ID,Question text,Answer text)")
    assert read_records(_without_first(f), None) == EXPECTED  # the rows alone read as before


def _without_first(f):
    g = f.with_name("rows.csv")
    g.write_text("".join(f.read_text().splitlines(keepends=True)[1:]))
    return g


@pytest.mark.parametrize("text, n", [
    ("label,title,content\n1,a b,c d\n", 1),  # the format's own header: skipped, as read_dbpedia_csv always did
    ("cat,animal,meow\ndog,animal,woof\n", 2),  # single words throughout: nothing tells a header from a record
    ("17,scipy.integrate.romb,Romberg integration.\n1,numpy.isin,Calculates x.\n", 2),  # the bundled data's form
])
def test_a_headerless_csv_whose_first_row_is_a_record_is_read(tmp_path, text, n):
    f = tmp_path / "r.csv"
    f.write_text(text)
    assert len(read_records(f, "dbpedia")) == n


def test_the_bundled_csvs_are_not_taken_for_headers():
    # the record counts of data/bundled_manifest.json: every row of the bundled header-less CSVs is read
    manifest = json.loads((ROOT / "data" / "bundled_manifest.json").read_text())["records"]["dbpedia"]
    for split in ("train", "val", "test"):
        assert len(read_records(ROOT / "data" / "docstrings_dbpedia" / f"{split}.csv")) == manifest[split], split


def test_dbpedia_fields_other_than_title_and_content_say_to_use_csv(tmp_path):
    f = tmp_path / "r.csv"
    f.write_text(csv_text(RECORDS))
    with pytest.raises(RoutestatsError, match=r"^--fields question,answer: --format dbpedia reads the columns "
                                              r"label,title,content by position.*pass --format csv$"):
        read_records(f, "dbpedia", ["question", "answer"])


def test_a_missing_column_or_key_is_refused_naming_those_there_are(tmp_path):
    forms = write_forms(tmp_path)
    # the default of --fields is named where it is the cause (a capture without --fields on another layout)
    says_fields = ("no column 'question' for --fields, whose default is title,content (columns: id, title, content); "
                   "name the text columns to read, e.g. --fields title,content")
    cases = [("csv", says_fields), ("parquet", says_fields), ("arrow", says_fields),
             ("jsonl", "line 1 has no key 'question' (keys: label, title, content)")]
    for name, says in cases:
        path, options = forms[name]
        with pytest.raises(RoutestatsError) as exc:
            read_records(path, cli_kwargs(options)["fmt"], ["title", "question"], label=cli_kwargs(options)["label"])
        assert str(exc.value) == f"{path}: {says}", name
    path = forms["csv"][0]
    with pytest.raises(RoutestatsError) as exc:
        read_records(path, "csv", ["title", "content"], label="qid")
    assert str(exc.value) == f"{path}: no column 'qid' for --label (columns: id, title, content)"
    with pytest.raises(RoutestatsError) as exc:
        read_records(forms["jsonl"][0], "jsonl", ["title"], label="qid")
    assert str(exc.value) == f"{forms['jsonl'][0]}: line 1 has no key 'qid' for --label (keys: label, title, content)"


def test_label_is_honoured_and_defaults_to_the_label_column_then_the_row_number(tmp_path):
    forms = write_forms(tmp_path)
    path = forms["csv"][0]  # header id,title,content
    assert [r.label for r in read_records(path, "csv", ["title"], label="id")] == ["q1", "q2", "q3", "q4"]
    assert [r.label for r in read_records(path, "csv", ["title"], label="title")] == [r[1] for r in RECORDS]
    # no column named label: the row number from 0
    assert [r.label for r in read_records(path, "csv", ["title"])] == ["0", "1", "2", "3"]
    assert [r.label for r in read_records(forms["parquet"][0], None, ["title"])] == ["0", "1", "2", "3"]
    # a JSONL key: the --label key, else "label"
    assert [r.label for r in read_records(forms["jsonl"][0], None, ["content"], label="title")] == \
        [r[1] for r in RECORDS]
    assert [r.label for r in read_records(forms["jsonl"][0], None, ["content"])] == ["q1", "q2", "q3", "q4"]
    # a non-string label column: its values as text
    pq.write_table(pa.table({"n": [7, 8], "title": ["a b", "c d"]}), tmp_path / "n.parquet")
    assert [r.label for r in read_records(tmp_path / "n.parquet", None, ["title"], label="n")] == ["7", "8"]
    # formats whose label is fixed refuse --label
    with pytest.raises(RoutestatsError, match="^--label names a column of --format csv, jsonl or datasets; dbpedia"):
        read_records(forms["dbpedia"][0], "dbpedia", label="id")


def test_tables_refuse_fields_that_are_not_text_and_null_text(tmp_path):
    f = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c"], "n": [1, 2, 3], "text": ["x y", "z", None]}), f)
    with pytest.raises(RoutestatsError) as exc:
        read_records(f, None, ["text", "n"])
    assert str(exc.value) == f"{f}: column 'n' holds int64, not text; --fields names text columns"
    with pytest.raises(RoutestatsError) as exc:
        read_records(f, None, ["text"])
    assert str(exc.value) == f"{f}: column 'text' is null (no text) in row 2"  # the third row (from 0) is None
    # --limit 2 slices before the check: the null row is never read
    assert [r.fields for r in read_records(f, None, ["text"], 2)] == [(("text", "x y"),), (("text", "z"),)]
    # without --fields: the text columns but the label's, in file order (n holds numbers)
    assert read_records(f, None, None, 1, label="id") == [Record(label="a", fields=(("text", "x y"),))]


def test_limit_stops_reading_before_later_rows(tmp_path):
    # row 4 of each file is broken (a CSV row of 2 columns, a JSONL line that is not JSON); --limit 3 never reads it
    c = tmp_path / "h.csv"
    c.write_text("id,title,content\na,b c,d\ne,f g,h\ni,j k,l\nbroken,row\n")
    assert len(read_records(c, "csv", ["title", "content"], 3, label="id")) == 3
    with pytest.raises(RoutestatsError, match=r"h.csv: row 5 has 2 columns, the header 3 \(id,title,content\)$"):
        read_records(c, "csv", ["title", "content"], label="id")  # row 5 counts the header row
    j = tmp_path / "h.jsonl"
    j.write_text('{"title": "a", "content": "b"}\n' * 3 + "{not json\n")
    assert len(read_records(j, None, ["title", "content"], 3)) == 3
    with pytest.raises(RoutestatsError, match=r"h.jsonl: line 4 is not JSON"):
        read_records(j, None, ["title", "content"])
    # a Parquet file of 5,000 rows in 5 row groups: --limit 3 gives its first 3 rows, labelled by their number from 0
    n = 5000
    big = tmp_path / "big.parquet"
    pq.write_table(pa.table({"title": [f"t {i}" for i in range(n)], "content": [f"c {i}" for i in range(n)]}), big,
                   row_group_size=1000)
    recs = read_records(big, None, ["title", "content"], 3)
    assert [r.fields[0][1] for r in recs] == ["t 0", "t 1", "t 2"] and [r.label for r in recs] == ["0", "1", "2"]


def test_a_table_value_over_the_record_limit_is_refused(tmp_path):
    f = tmp_path / "w.parquet"
    pq.write_table(pa.table({"title": ["short", "x" * 200]}), f)
    with pytest.raises(RoutestatsError) as exc:
        read_records(f, None, ["title"], max_bytes=100)
    # 100 bytes = 9.54e-05 MB, printed with 3 significant digits as the CSV and JSONL refusals are
    assert str(exc.value) == f"{f}: column 'title' of row 1 is over the 9.54e-05 MB record limit (--max-record-mb)"


def test_a_header_csv_field_over_the_record_limit_is_refused(tmp_path):
    f = tmp_path / "w.csv"
    f.write_text("title,content\nshort," + "x" * 200 + "\n")
    with pytest.raises(RoutestatsError, match=r"w.csv: a field near line 2 is over the 9.54e-05 MB record limit"):
        read_records(f, "csv", ["title", "content"], max_bytes=100)


def test_a_datasetdict_folder_needs_split(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.disable_progress_bars()
    train = datasets.Dataset.from_dict(columns("label"))
    test = datasets.Dataset.from_dict({k: v[2:] for k, v in columns("label").items()})
    datasets.DatasetDict({"train": train, "test": test}).save_to_disk(tmp_path / "dd")
    with pytest.raises(RoutestatsError) as exc:
        read_records(tmp_path / "dd", None, ["title", "content"])
    assert str(exc.value) == f"{tmp_path / 'dd'}: holds the splits train, test; pass --split NAME"
    with pytest.raises(RoutestatsError) as exc:
        read_records(tmp_path / "dd", None, ["title", "content"], split="validation")
    assert str(exc.value) == f"--split validation: {tmp_path / 'dd'} holds the splits train, test"
    # the test split holds records 3 and 4 (columns sliced from index 2 above)
    assert read_records(tmp_path / "dd", None, ["title", "content"], split="test") == EXPECTED[2:]
    assert read_records(tmp_path / "dd" / "train", None, ["title", "content"], 1) == EXPECTED[:1]
    with pytest.raises(RoutestatsError, match="holds one dataset, not a DatasetDict"):
        read_records(tmp_path / "dd" / "train", None, ["title", "content"], split="train")
    with pytest.raises(RoutestatsError, match=r"--split picks a split of a datasets folder \(--format datasets\)"):
        read_records(ROOT / "data" / "docstrings_dbpedia" / "val.csv", None, split="train")


def test_a_datasets_folder_without_the_package_names_the_extra(tmp_path, monkeypatch):
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "state.json").write_text("{}")  # what save_to_disk writes first: enough to be recognised
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets raises ImportError
    with pytest.raises(RoutestatsError) as exc:
        read_records(tmp_path / "ds", None, ["title"])
    assert str(exc.value) == (f'{tmp_path / "ds"}: reading a datasets folder needs the datasets package: '
                              'pip install -e ".[datasets]"')
    with pytest.raises(RoutestatsError, match="not one written by datasets' save_to_disk"):
        read_records(tmp_path, None, ["title"])  # a folder of other files


# ------------------------------------------------------------------ the documentation's examples
def doc_section() -> str:
    text = (ROOT / "docs" / "real-models.md").read_text()
    return text.split("## Your own records\n", 1)[1].split("\n## ", 1)[0]


def test_the_documented_example_files_read_to_the_same_records(tmp_path, monkeypatch):
    # every file the section shows ("`name`:" above a text block) is read as its command reads it
    section = doc_section()
    files = dict(re.findall(r"^`([\w.-]+)`:\n```text\n(.*?)```", section, re.S | re.M))
    assert set(files) == {"qa.csv", "qa-noheader.csv", "qa.jsonl"}
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    commands = [c.replace("\\\n", " ") for c in re.findall(r"```text\n(.*?)```", section, re.S)]
    commands = [line for c in commands for line in c.splitlines() if line.startswith("python -m runners capture")]

    def read_as(command):
        args = command.split()
        opt = {a: b for a, b in zip(args, args[1:]) if a.startswith("--")}
        fields = opt.get("--fields", "title,content").split(",")
        return read_records(tmp_path / opt["--records"], opt.get("--format"), fields, label=opt.get("--label"),
                            split=opt.get("--split"))

    monkeypatch.chdir(tmp_path)
    by_file = {c.split("--records ")[1].split()[0]: c for c in commands}
    qa = read_as(by_file["qa.csv"])
    # 2 records, labels from the id column, fields question then answer (the example file's rows)
    assert [r.label for r in qa] == ["q1", "q2"] and [f for f, _ in qa[0].fields] == ["question", "answer"]
    assert qa[1].fields[1] == ("answer", "Romberg integration using samples of a function.")
    assert read_as(by_file["qa.jsonl"]) == qa
    noheader = read_as(by_file["qa-noheader.csv"])  # the same texts, under dbpedia's names title and content
    assert [(r.label, [t for _, t in r.fields]) for r in noheader] == [(r.label, [t for _, t in r.fields]) for r in qa]
    # the refusal the section quotes is the one read_records gives for qa.csv without --format csv
    quoted = re.search(r"^error: (qa\.csv: its first row .*)$", section, re.M).group(1)
    with pytest.raises(RoutestatsError) as exc:
        read_records(Path("qa.csv"), None, ["question", "answer"])
    assert str(exc.value) == quoted
    # the Python block builds the datasets folder, the Parquet file and the DatasetDict the commands read
    datasets = pytest.importorskip("datasets")
    datasets.disable_progress_bars()
    exec(re.search(r"```python\n(.*?)```", section, re.S).group(1), {})
    for name in ("qa-dataset", "qa.parquet", "qa-splits"):
        assert read_as(by_file[name]) == qa, name


# ------------------------------------------------------------------ captures
@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.tiny_models import save_tiny

    return save_tiny("bert", tmp_path_factory.mktemp("bert") / "model", [t for r in RECORDS for t in r[1:]])


def run_cli(args, capsys):
    from tests.conftest import runners_cli

    return runners_cli(["capture", "--threads", "1", *args], capsys)


@pytest.mark.torch
def test_every_form_captures_to_identical_runs(bert, tmp_path, capsys):
    forms = write_forms(tmp_path / "records")
    runs = {}
    for name, (path, options) in forms.items():
        out = tmp_path / "runs" / name
        code, _, err = run_cli(["--model", bert, "--records", path, *options, "--out", out, "--limit", "3",
                                "--cap", "24", "--bias", "1"], capsys)
        assert code == 0, (name, err)
        runs[name] = out
    first = runs.pop("csv")
    for cond in ("baseline", "bias"):
        ex = pd.read_parquet(first / cond / "examples.parquet")
        # --limit 3 of the 4 records; labels from the id column (--label id)
        assert ex["label"].tolist() == ["q1", "q2", "q3"]
        man = json.loads((first / cond / "run.json").read_text())
        assert man["evaluation"]["fields"] == ["title", "content"]
        att = sorted((first / cond / "attention").rglob("*.parquet"))
        assert [p.relative_to(first / cond).as_posix() for p in att] == ["attention/step=000000/reductions.parquet"]
        for name, out in runs.items():
            pd.testing.assert_frame_equal(pd.read_parquet(out / cond / "examples.parquet"), ex, obj=name)
            for p in att:
                pd.testing.assert_frame_equal(pd.read_parquet(out / cond / p.relative_to(first / cond)),
                                              pd.read_parquet(p), obj=name)
            other = json.loads((out / cond / "run.json").read_text())
            assert {k: other[k] for k in ("data_order_id", "init_id")} == {k: man[k] for k in ("data_order_id",
                                                                                            "init_id")}, name
            assert other["evaluation"]["fields"] == man["evaluation"]["fields"], name


@pytest.mark.torch
@pytest.mark.parametrize("options", [["--format", "dbpedia"], []])
def test_an_undeclared_header_is_refused_in_one_line_through_the_cli(bert, tmp_path, capsys, options):
    # the user's file: a header id,question,answer above 3 records; declared header-less, or no --format at all
    f = tmp_path / "my.csv"
    f.write_text(csv_text([("id", "question", "answer"), *RECORDS[:3]]))
    code, out, err = run_cli(["--model", bert, "--records", f, *options, "--fields", "question,answer", "--out",
                              tmp_path / "out"], capsys)
    assert code == 2 and out == ""
    assert err.splitlines() == [f"error: {f}: its first row looks like a header (id,question,answer); pass --format "
                                "csv to read columns by name, or remove the row"]
    assert not (tmp_path / "out").exists()
    # declared, it is read by name: 3 records, labelled by the id column
    code, _, err = run_cli(["--model", bert, "--records", f, "--format", "csv", "--fields", "question,answer",
                            "--label", "id", "--cap", "24", "--out", tmp_path / "out"], capsys)
    assert code == 0, err
    assert pd.read_parquet(tmp_path / "out" / "baseline" / "examples.parquet")["label"].tolist() == ["q1", "q2", "q3"]
    code, _, err = run_cli(["--model", bert, "--records", f, "--format", "csv", "--fields", "question,answr",
                            "--out", tmp_path / "out2"], capsys)
    assert code == 2 and err.splitlines() == [f"error: {f}: no column 'answr' for --fields, whose default is "
                                              "title,content (columns: id, question, answer); name the text columns "
                                              "to read, e.g. --fields id,question"]
