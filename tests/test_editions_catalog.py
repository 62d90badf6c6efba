"""Message catalogs for the editions: what is extracted, how a template is looked up, and what is refused."""
from __future__ import annotations

from pathlib import Path

import pytest
from babel.messages.catalog import Catalog
from babel.messages.pofile import write_po

from helpers.infra import messages
from script_module import load

ROOT = Path(__file__).resolve().parents[1]


def extractor():
    return load("extract-messages")


def test_extraction_finds_every_kind_of_template():
    ids = {m.id for m in extractor().extract() if m.id}
    assert "✔ Exercise {id}: right." in ids                                         # infra, through message()
    assert "Count the keys *and* the values: each layer stores two vectors per KV head." in ids   # a Mistake
    assert ("on our model too, the same resident tokens cost the same bytes however they are split"
            in ids)                                                                 # a claim in notebook 03
    assert "Cache of the chapter's model (fp16): users x tokens per user" in ids    # a figure title
    assert "tokens per user" in ids                                                  # its axis label


def test_templates_held_in_names_and_axis_titles_are_found():
    source = ('LATE = "it stopped" if r > 1 else "it falls"\n'
              'CASES = {True: "met {x}", False: "not met {x}"}\n'
              'OTHER = "never printed"\n'
              'say(LATE)\nsay(CASES[ok], x=1)\nfig = figure("a title", "x label", "y label")\n'
              'fig.update_layout(title_text="t1", xaxis_title="t2", height=300)\nfig.update_yaxes(title_text="t3")\n'
              'fig.add_vline(x=1, annotation_text="t4", annotation_position="top")\n')
    assert sorted(t for _, t in extractor().templates(source)) == sorted(
        ["it stopped", "it falls", "met {x}", "not met {x}", "a title", "x label", "y label", "t1", "t2", "t3", "t4"])


# keywords whose string is text a reader sees in a figure or a control (not textposition=, hovermode=, ...)
LABEL_KEYWORDS = ("title", "title_text", "annotation_text", "name", "label", "prefix", "description", "hint")


def test_no_figure_or_control_label_escapes_the_catalog():
    """Every string literal given as a title, an annotation, a trace's name or a control's label, in the helpers
    and the notebooks' code, is an extracted template: else an edition shows it in English (03's calculator title
    and 02's figure titles once did)."""
    import ast

    ex = extractor()
    ids = {m.id for m in ex.extract() if m.id}
    escaped = []
    for where, source in ex.sources():
        for node in ast.walk(ast.parse(source)):
            for k in getattr(node, "keywords", []) if isinstance(node, ast.Call) else []:
                text = ex._text(k.value)
                labelled = (k.arg or "").endswith(LABEL_KEYWORDS) and text and any(c.isalpha() for c in text)
                if labelled and text not in ids:
                    escaped.append(f"{where}:{node.lineno} {k.arg}={text!r}")
    assert not escaped, escaped


def test_templates_reads_a_controls_description_given_by_position():
    source = ('int_slider(64, 8, 1024, 8, "cache tokens per request")\n'
              'float_slider(2.0, 1.1, 4.0, 0.1, "knee at latency x")\n'
              'dropdown(["a", "b"], "a", "model")\ntext("", "prompt")\n')
    assert [t for _, t in extractor().templates(source)] == ["cache tokens per request", "knee at latency x",
                                                               "model", "prompt"]


def test_templates_reads_claims_and_measure_checked_tuples():
    source = ('claim(r < 2, "decode is flat", "{r:.2f}x", r=r)\n'
              'def checks(t):\n    return {"a": (t < 1, "it is quick", "{t:.1f} s", dict(t=t))}\n'
              'say(f"{x}")\n')
    assert [t for _, t in extractor().templates(source)] == ["decode is flat", "{r:.2f}x", "it is quick",
                                                               "{t:.1f} s"]


@pytest.fixture
def hindi(tmp_path, monkeypatch):
    po = Catalog(locale="hi")
    po.add("{n:,} tokens in {s:.1f} s", "{s:.1f} s में {n:,} tokens")
    po.add("a fuzzy one", "धुंधला", flags=["fuzzy"])
    po.add("an empty one", "")
    po.add("{n} layers", "{count} layers")
    path = tmp_path / "locale" / "hi" / "LC_MESSAGES" / "helpers.po"
    path.parent.mkdir(parents=True)
    with path.open("wb") as f:
        write_po(f, po)
    monkeypatch.setattr(messages, "LOCALE", tmp_path / "locale")
    messages.catalog.cache_clear(), messages._translations.cache_clear()
    monkeypatch.setenv(messages.EDITION_ENV, "hi")
    yield
    messages.catalog.cache_clear(), messages._translations.cache_clear()


def test_an_edition_prints_its_translation_with_the_same_numbers(hindi):
    assert messages.message("{n:,} tokens in {s:.1f} s", n=1234567, s=2.25) == "2.2 s में 1,234,567 tokens"


def test_missing_fuzzy_or_empty_translations_print_in_english(hindi):
    assert messages.message("a fuzzy one") == "a fuzzy one"
    assert messages.message("an empty one") == "an empty one"
    assert messages.message("not in the catalog {x}", x=1) == "not in the catalog 1"


def test_a_translation_with_other_fields_is_refused_in_one_sentence(hindi):
    with pytest.raises(ValueError, match=r"hi translation of '\{n\} layers' uses the fields \['count'\]"):
        messages.message("{n} layers", n=3)


def test_the_edition_comes_from_the_setting_then_the_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(messages.EDITION_ENV, raising=False)
    (tmp_path / "hi").mkdir()
    monkeypatch.chdir(tmp_path / "hi")
    assert messages.edition() == "hi"
    monkeypatch.chdir(tmp_path)
    assert messages.edition() == "en"
    monkeypatch.setenv(messages.EDITION_ENV, "ur")
    assert messages.edition() == "ur"
    monkeypatch.setenv(messages.EDITION_ENV, "fr")
    with pytest.raises(ValueError, match="MIC_EDITION must be one of en, hi, ur"):
        messages.edition()


def test_templates_an_edition_lacks_are_recorded_when_asked(hindi, tmp_path, monkeypatch):
    record = tmp_path / "missing.txt"
    monkeypatch.setenv(messages.MISSING_ENV, str(record))
    messages.message("{n:,} tokens in {s:.1f} s", n=1, s=1.0)       # translated: not recorded
    messages.message("not in the catalog {x}", x=1)
    messages.message("a fuzzy one")
    messages.message("{s:.1f} s में {n:,} tokens", n=1, s=1.0)    # already a translation: not missing either
    assert record.read_text(encoding="utf8").splitlines() == ["not in the catalog {x}", "a fuzzy one"]


BUILT = sorted((ROOT / "build").glob("missing-*.txt"))


@pytest.mark.skipif(not BUILT, reason="written by an edition's site build (make book, make test)")
@pytest.mark.parametrize("record", BUILT, ids=[p.stem for p in BUILT])
def test_every_template_an_edition_printed_is_in_its_catalog(record):
    """The edition's build ran every notebook with MIC_MISSING_MESSAGES: nothing printed in English on the way."""
    missing = sorted(set(record.read_text(encoding="utf8").splitlines()))
    assert not missing, f"{record.stem}: {len(missing)} templates printed untranslated, e.g. {missing[:3]}"


CATALOGS = sorted((ROOT / "locale").glob("*/LC_MESSAGES/helpers.po"))


@pytest.mark.parametrize("path", CATALOGS, ids=[p.parts[-3] for p in CATALOGS])
def test_each_catalog_translates_every_extracted_template_with_its_fields(path):
    from babel.messages.pofile import read_po

    with path.open("rb") as f:
        po = {m.id: m for m in read_po(f) if m.id}
    wanted = [m.id for m in extractor().extract() if m.id]
    absent = [t for t in wanted if t not in po]
    assert not absent, f"{len(absent)} templates not in the catalog (scripts/extract-messages --update), e.g. {absent[:3]}"
    empty = [t for t in wanted if not po[t].string or po[t].fuzzy]
    assert not empty, f"{len(empty)} templates empty or fuzzy, e.g. {empty[:3]}"
    other = [t for t in wanted if messages.fields_of(po[t].string) != messages.fields_of(t)]
    assert not other, f"{len(other)} translations with other fields, e.g. {other[:3]}"


def test_the_site_interface_catalogs_translate_the_same_strings():
    from babel.messages.pofile import read_po

    ids = {p.parts[-3]: {m.id for m in read_po(p.open("rb")) if m.id and m.string}
           for p in (ROOT / "locale").glob("*/LC_MESSAGES/theme.po")}
    assert "hi" in ids and ids["hi"] >= {"Contents", "On this page", "Search this book...", "By"}
    assert all(v == ids["hi"] for v in ids.values()), {k: sorted(ids["hi"] ^ v)[:5] for k, v in ids.items()}


def test_labels_written_straight_into_a_figure_are_looked_up(hindi):
    from helpers.infra import plotting
    po = Catalog(locale="hi")
    po.add("cached", "cached (हिंदी)")
    po.add("speed-up", "तेज़ी")
    po.add("{n} layers", "{n} layers (हिंदी)")
    with (messages.LOCALE / "hi" / "LC_MESSAGES" / "helpers.po").open("wb") as f:
        write_po(f, po)
    messages.catalog.cache_clear()
    fig = {"data": [{"name": "cached"}, {"name": "3 layers"}],
           "layout": {"yaxis2": {"title": {"text": "speed-up"}}, "annotations": [{"text": "cached"}],
                      "title": {"text": "cached"}}}
    plotting.edition_labels(fig)
    assert [t["name"] for t in fig["data"]] == ["cached (हिंदी)", "3 layers"]     # a formatted label stays
    assert fig["layout"]["title"]["text"] == "cached (हिंदी)"          # update_layout(title_text=...)
    assert fig["layout"]["yaxis2"]["title"]["text"] == "तेज़ी"
    assert fig["layout"]["annotations"][0]["text"] == "cached (हिंदी)"


def test_urdu_runs_right_to_left_and_its_figure_labels_are_isolates(monkeypatch):
    monkeypatch.setenv(messages.EDITION_ENV, "ur")
    assert messages.direction() == "rtl" and messages.direction("hi") == "ltr"
    fig = {"layout": {"title": {"text": "KV cache کا سائز<br>دوسری line<br>32 layers"},
                      "xaxis": {"title": {"text": "tokens"}}},
           "data": [{"name": "cached", "text": ["12 ms"]}]}
    assert messages.isolate_rtl(fig) is fig
    assert fig["layout"]["title"]["text"] == ("\u2067KV cache کا سائز\u2069<br>\u2067دوسری line\u2069"
                                              "<br>32 layers")
    assert fig["layout"]["xaxis"]["title"]["text"] == "tokens" and fig["data"][0]["text"] == ["12 ms"]
    assert messages.isolate_rtl(fig) == fig                        # isolated once, not twice
    twice = messages.isolate_rtl(messages.isolate_rtl(["32 layers<br>کا سائز"]))
    assert twice == ["32 layers<br>\u2067کا سائز\u2069"]                  # a Latin first line, then Urdu: once too


def test_a_urdu_slider_reads_its_value_inside_its_label():
    """plotly.js writes prefix + value + suffix as one text: closed in the prefix, the isolate left the value on
    the far side of the Urdu label (at its start, for a reader going right to left)."""
    slider = {"currentvalue": {"prefix": "users (ہر step x2): "}, "steps": [{"label": "1"}]}
    messages.isolate_rtl(slider)
    assert slider["currentvalue"] == {"prefix": "\u2067users (ہر step x2): ", "suffix": "\u2069"}
    english = {"currentvalue": {"prefix": "users: "}}
    assert messages.isolate_rtl(english) == {"currentvalue": {"prefix": "users: "}}
    assert messages.isolate_rtl(slider)["currentvalue"]["suffix"] == "\u2069"            # once, not twice


def test_say_prints_urdu_as_a_right_to_left_block_with_its_fields_left_to_right(monkeypatch):
    from helpers.infra import controls
    shown = []
    monkeypatch.setattr(controls, "display", lambda bundle, raw: shown.append(bundle["text/markdown"]))
    for edition in ("ur", "hi"):
        monkeypatch.setenv(messages.EDITION_ENV, edition)
        controls.say("**{path}** holds {n:,} tokens of a test sentence {line!r}", path="/tmp/m", n=1234, line="یہ")
    assert shown == ['<div dir="rtl" lang="ur">\n\n**\u2066/tmp/m\u2069** holds \u20661,234\u2069 tokens of a test '
                     "sentence 'یہ'\n\n</div>", "**/tmp/m** holds 1,234 tokens of a test sentence 'یہ'"]
