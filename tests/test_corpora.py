"""Corpus readers (DBpedia CSV, PubMed RCT text) and the bundled docstring corpora."""

import json
from pathlib import Path

import pytest

from runners import bundled
from runners.corpora import (
    CorpusFormatError,
    iter_pubmed,
    read_dbpedia_csv,
    split_rows,
    write_dbpedia_csv,
    write_pubmed,
)

DATA = Path(__file__).resolve().parent.parent / "data"


def test_split_rows_matches_reference_example():
    # METHODS 5.1: 12 rows, validation 3, seed 42 -> permutation 10, 9, 0, 8, 5, 2, 1, 11, 4, 7, 3, 6
    rows = list(range(12))
    val, train = split_rows(rows, 3, seed=42)
    assert val == [10, 9, 0]
    assert train == [8, 5, 2, 1, 11, 4, 7, 3, 6]


def test_dbpedia_csv_header_blank_rows_and_quotes(tmp_path):
    f = tmp_path / "x.csv"
    f.write_text('Label,Title,Content\n\n1,"A, b"," text with ""quotes"" "\n2,B,c\n')
    assert read_dbpedia_csv(f) == [("1", "A, b", 'text with "quotes"'), ("2", "B", "c")]


def test_dbpedia_csv_bad_row(tmp_path):
    f = tmp_path / "x.csv"
    f.write_text("1,a,b\n2,a\n")
    with pytest.raises(CorpusFormatError, match="row 2 has 2 columns, expected 3"):
        read_dbpedia_csv(f)


def test_dbpedia_round_trip(tmp_path):
    rows = [("1", "Aerostar", "An aircraft, \"fast\"."), ("14", "X", "y")]
    f = tmp_path / "r.csv"
    f.write_bytes(write_dbpedia_csv(rows))
    assert read_dbpedia_csv(f) == rows


def test_pubmed_reader_keeps_complete_abstracts(tmp_path):
    f = tmp_path / "p.txt"
    f.write_bytes(
        write_pubmed(
            [
                ("1", [("BACKGROUND", "bg."), ("METHODS", "m1."), ("METHODS", "m2."), ("RESULTS", "r."), ("CONCLUSIONS", "c.")]),
                ("2", [("METHODS", "m."), ("RESULTS", "r.")]),  # no conclusions: dropped
            ]
        )
    )
    recs = list(iter_pubmed(f))
    assert len(recs) == 1
    assert recs[0].label == "1"
    assert recs[0].fields == (("methods", "m1. m2."), ("results", "r."), ("conclusions", "c."))


def test_pubmed_reader_errors(tmp_path):
    f = tmp_path / "p.txt"
    f.write_text("METHODS\tx\n")
    with pytest.raises(CorpusFormatError, match="line 1 comes before any ###<id> line"):
        list(iter_pubmed(f))
    f.write_text("###1\nMETHODS x\n")
    with pytest.raises(CorpusFormatError, match="line 2 has no TAB"):
        list(iter_pubmed(f))


def test_bundled_corpora_read_with_the_real_loaders():
    manifest = json.loads((DATA / "bundled_manifest.json").read_text())
    rows = read_dbpedia_csv(DATA / "docstrings_dbpedia" / "train.csv")
    assert len(rows) == manifest["records"]["dbpedia"]["train"] > 1000
    classes = (DATA / "docstrings_dbpedia" / "classes.txt").read_text().split()
    assert {int(r[0]) for r in rows} <= set(range(1, len(classes) + 1))
    recs = list(iter_pubmed(DATA / "docstrings_pubmed" / "dev.txt", fields=("summary", "parameters", "returns")))
    assert len(recs) == manifest["records"]["pubmed"]["dev"] > 100
    assert all(len(r.fields) == 3 and all(t for _, t in r.fields) for r in recs)
    # NOTES sections exist in the file and are dropped by the loader, as BACKGROUND is for PubMed
    assert "\nNOTES\t" in (DATA / "docstrings_pubmed" / "dev.txt").read_text()


def test_bundled_build_is_deterministic(tmp_path):
    a = bundled.build(tmp_path / "a")
    b = bundled.build(tmp_path / "b")
    assert a["files"] == b["files"]
    for rel in a["files"]:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()
