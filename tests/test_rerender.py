"""One execution for three editions (issue 39): an English run's outputs, said again in an edition's words, are what
a kernel of that edition would have shown, with the English run's numbers."""
from __future__ import annotations

import copy
import json

import nbformat
import pytest

from helpers.infra import outputs, plotting, tables
from helpers.infra.messages import message, record, render
from mic_tools import rerender

SAID = "naive {a:.2f} s, cached {b:.2f} s ({r:.1f}x), tokens DIFFER:"      # templates the catalogs translate
TITLE = "Cache of the chapter's model (fp16): users x tokens per user"
ERROR = "Type a prompt first."


def bundles() -> list[dict]:
    """What a kernel shows for a sentence, a figure and a table, in whichever edition this process is."""
    said = outputs.say_bundle(message(SAID, a=1.23456, b=0.5, r=2.46912))
    fig = plotting.figure(TITLE, "tokens per user", "")
    fig.add_scatter(x=[1, 2, 3], y=[0.25, 0.5, 0.75], name="cached")
    drawn = plotting.MicRenderer().to_mimebundle(fig.to_dict())
    df = tables.table({"scheme": ["fp32", "real INT8"], "agreement": [message(ERROR), "12/24"]}, index="scheme")
    table = {"text/html": df.to_html(), **outputs.table_texts(df)}
    return [said, drawn, table]


def as_outputs(data: list[dict]) -> list[dict]:
    return [nbformat.v4.new_output("display_data", data=d) for d in data]


def plotly_part(bundle: dict) -> dict:
    """A figure's plotly JSON without its template (a kernel's template is made as the helpers are imported)."""
    fig = copy.deepcopy(bundle["application/vnd.plotly.v1+json"])
    fig["layout"].pop("template", None)
    return fig


@pytest.mark.parametrize("name", ["hi", "ur"])
def test_an_edition_shows_what_its_kernel_would_with_the_english_numbers(name):
    english = bundles()
    again = [rerender.rerendered_output(o, name)["data"] for o in as_outputs(english)]
    with rerender.edition(name):
        native = bundles()
    assert again[0]["text/markdown"] == native[0]["text/markdown"]
    assert "1.23" in again[0]["text/markdown"] and "2.5" in again[0]["text/markdown"]
    assert again[0]["text/markdown"] != english[0]["text/markdown"]
    assert plotly_part(again[1]) == plotly_part(native[1])
    assert plotly_part(again[1])["layout"]["title"]["text"] != plotly_part(english[1])["layout"]["title"]["text"]
    font = again[1]["application/vnd.plotly.v1+json"]["layout"]["template"]["layout"]["font"]["family"]
    assert font.startswith('"Noto'), font                       # the edition's script font first
    assert again[2]["text/html"] == native[2]["text/html"]
    assert message(ERROR) not in again[2]["text/html"]


def test_english_outputs_are_left_as_they_are():
    english = bundles()
    again = [rerender.rerendered_output(o, "en")["data"] for o in as_outputs(english)]
    assert again[0] == english[0] and again[2] == english[2]
    assert plotly_part(again[1]) == plotly_part(english[1])


def test_a_record_says_nested_sentences_and_errors_again():
    inner = message(ERROR)
    rec = record(message("ValueError: {error}", error=ValueError(inner)))
    assert json.loads(json.dumps(rec)) == rec                   # it travels in a notebook as JSON
    with rerender.edition("hi"):
        assert render(rec, "hi") == message("ValueError: {error}", error=message(ERROR))
    assert render(rec, "en") == f"ValueError: {ERROR}"


def test_an_edition_notebook_takes_the_english_outputs_cell_by_cell():
    english = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("a = 1"), nbformat.v4.new_code_cell("say()"),
                                              nbformat.v4.new_code_cell("solution()")])
    english.cells[1].outputs = as_outputs(bundles()[:1])
    edition = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("हिंदी"),
                                              nbformat.v4.new_code_cell("a = 1"), nbformat.v4.new_code_cell("say()")])
    out = rerender.with_english_outputs(edition, english, "hi")
    assert out.cells[0].source == "हिंदी" and out.cells[2].outputs[0]["data"]["text/markdown"].startswith("naive")
    assert "1.23" in out.cells[2].outputs[0]["data"]["text/markdown"]
    edition.cells[2].source = "say(1)"
    with pytest.raises(ValueError, match="sync-editions"):
        rerender.with_english_outputs(edition, english, "hi")


def test_a_sentence_passed_on_whole_keeps_its_own_template():
    """``say("{line}", line=verdict)`` passes a sentence on: its record is the sentence's, not a loop."""
    inner = str(message(ERROR))                 # a plain copy, as str() or a DataFrame cell gives
    rec = record(message("{line}", line=inner))
    assert rec == {"template": "{line}", "fields": {"line": {"template": ERROR, "fields": {}}}}
    assert render(rec, "hi") != ERROR


def test_a_record_keeps_a_nan_a_number():
    rec = json.loads(json.dumps(record(message("{w:.0%} with it, {wo:.0%} without (uniform {u:.0%})", w=0.5,
                                               wo=float("nan"), u=float("inf")))))
    assert render(rec, "en") == "50% with it, nan% without (uniform inf%)"
