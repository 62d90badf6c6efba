"""helpers.infra.tables: this run's numbers beside the chapter's, labels looked up like every printed template."""
import pytest

from helpers.infra import tables
from script_module import load


def test_beside_chapter_formats_each_row_and_dashes_what_the_chapter_lacks():
    df = tables.beside_chapter({"throughput, batch 1 to {knee}": (6.234, 6.0, "{:.1f}x"),
                                "the knee": (8, 16), "largest gap": (0.5, None, "{:.1e}")}, knee=16)
    assert list(df.index) == ["throughput, batch 1 to 16", "the knee", "largest gap"]
    assert df.values.tolist() == [["6.2x", "6.0x"], ["8", "16"], ["5.0e-01", "—"]]
    assert list(df.columns) == ["this run", "the chapter"]


def test_beside_chapter_refuses_a_field_no_label_uses():
    with pytest.raises(ValueError, match="knee"):
        tables.beside_chapter({"the knee": (8, 16)}, knee=16)


def test_table_labels_its_columns_and_indexes_by_one():
    df = tables.table({"batch": [1, 2], "step ({unit})": [3.0, 4.5]}, index="batch", unit="ms")
    assert df.index.name == "batch" and list(df.columns) == ["step (ms)"] and df["step (ms)"].tolist() == [3.0, 4.5]


def test_the_labels_given_to_either_table_are_extracted_as_templates():
    source = ('beside_chapter({"the knee": (k, 16), "gap {n}": (g, None)}, n=1)\n'
              'table({"batch": b, "step (ms)": s}, index="batch")\n'
              'table({"scheme": ["int8", "int4"], "error": e}, index="scheme")\n')
    found = [t for _, t in load("extract-messages").templates(source)]
    assert sorted(found) == sorted(["the knee", "gap {n}", "batch", "step (ms)", "batch",
                                    "scheme", "error", "scheme", "int8", "int4"])


def test_a_tables_row_labels_are_looked_up_in_the_editions_catalog(monkeypatch):
    monkeypatch.setattr(tables, "catalog", lambda name: {"decimal GB": "दशमलव GB"})
    df = tables.table({"assumption": ["decimal GB", "GiB"], "tokens": [1, 2]}, index="assumption")
    assert list(df.index) == ["दशमलव GB", "GiB"]
    two = tables.table({"card": [8, 16], "model": ["7B", "decimal GB"], "tokens": [1, 2]}, index=["card", "model"])
    assert list(two.index) == [(8, "7B"), (16, "दशमलव GB")]


def test_a_list_of_index_columns_has_its_row_labels_extracted():
    source = 'table({"card": [8, 16], "model": ["7B", "13B"], "n": n}, index=["card", "model"])\n'
    found = [t for _, t in load("extract-messages").templates(source)]
    assert sorted(found) == sorted(["card", "model", "n", "card", "model", "7B", "13B"])


def test_a_row_label_may_name_the_tables_fields():
    df = tables.table({"student": ["first {n} layers", "the teacher"], "kl": [1.0, 0.0]}, index="student", n=10)
    assert list(df.index) == ["first 10 layers", "the teacher"]
