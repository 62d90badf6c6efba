from helpers.infra import controls


def test_live_shows_nothing_on_the_static_site(monkeypatch):
    monkeypatch.setenv(controls.STATIC_ENV, "1")
    assert controls.is_static()
    assert controls.live(lambda k: k, k=(1, 3)) is None


def test_live_turns_value_errors_into_one_line(monkeypatch, capsys):
    monkeypatch.delenv(controls.STATIC_ENV, raising=False)
    seen = []

    def fn(k):
        seen.append(k)
        if k > 2:
            raise ValueError("k must be at most 2.")
        return k

    ui = controls.live(fn, k=controls.int_slider(1, 0, 5))
    assert ui is not None and seen == [1]
    ui.children[0].value = 4            # move the slider past the limit: no traceback, still usable
    assert seen == [1, 4]
    ui.children[0].value = 2
    assert seen == [1, 4, 2]
    assert "&#9888; k must" in controls.error_line("k must be at most 2.")


def test_stream_box_is_a_widget_whose_value_is_set_live_and_nothing_on_the_static_site(monkeypatch):
    monkeypatch.delenv(controls.STATIC_ENV, raising=False)
    box = controls.stream_box("prefilling...")
    assert box.value == "prefilling..." and controls.STREAM_CLASS in box._dom_classes
    box.value = "<b>Paris</b>"
    assert box.get_state()["value"] == "<b>Paris</b>"     # what the browser receives
    monkeypatch.setenv(controls.STATIC_ENV, "1")
    quiet = controls.stream_box("x")
    assert not hasattr(quiet, "get_state")                # no widget: the static page stays clean
    quiet.value = "ignored"


def test_dropdowns_are_wide_enough_for_their_longest_label():
    name = "model.layers.27.mlp.gate_proj.weight"
    built = controls.widget("Dropdown", options=["short", name], description="matrix").build()
    assert built.layout.width == f"calc({len(name) + len('matrix')}ch + 4em)"
    pairs = controls.dropdown([("a very long label indeed", 1), ("b", 2)], description="x").build()
    assert pairs.layout.width.startswith(f"calc({len('a very long label indeed') + 1}ch")


def test_live_as_a_cells_last_value_shows_its_controls_once():
    """A cell ending in ``live(...)`` must not display the widget a second time as its result."""
    import os
    from pathlib import Path

    import nbclient
    import nbformat

    src = Path(__file__).resolve().parents[1] / "src"
    cell = nbformat.v4.new_code_cell(f"import sys; sys.path.insert(0, {str(src)!r})\n"
                                     "from helpers.infra.controls import live, int_slider\n"
                                     "live(lambda a: a * 2, a=int_slider(1, 0, 5, 1, 'a'))")
    nb = nbformat.v4.new_notebook(cells=[cell])
    env_before = os.environ.pop(controls.STATIC_ENV, None)
    try:
        nbclient.NotebookClient(nb, kernel_name="python3", timeout=120).execute()
    finally:
        if env_before is not None:
            os.environ[controls.STATIC_ENV] = env_before
    views = [o for o in nb.cells[0].outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert len(views) == 1, [o.output_type for o in nb.cells[0].outputs]


def test_live_fills_its_output_widget_itself_and_never_asks_the_front_end_to_capture(monkeypatch):
    """Issue 25: `with out:` makes nbclient send each captured output back on the shell channel, which can stall
    `jupyter nbconvert --execute` until the cell timeout; live() puts what its function shows into `out.outputs`."""
    import ipywidgets
    monkeypatch.delenv(controls.STATIC_ENV, raising=False)
    captures = []
    monkeypatch.setattr(ipywidgets.Output, "__enter__", lambda self: captures.append(self))

    def fn(k):
        print("k is", k)
        print("10%\r50%\r100%")
        if k == 3:
            raise ZeroDivisionError("k is 3")
        return k                                   # outside IPython, display() prints it

    ui = controls.live(fn, k=controls.int_slider(1, 0, 5))
    assert ui.out.outputs == ({"output_type": "stream", "name": "stdout", "text": "k is 1\n100%\n1\n"},)
    ui.children[0].value = 3
    (out, err) = ui.out.outputs
    assert out["text"] == "k is 3\n100%\n" and err["output_type"] == "error" and err["ename"] == "ZeroDivisionError"
    ui.children[0].value = 2
    assert [o["output_type"] for o in ui.out.outputs] == ["stream"] and ui.out.outputs[0]["text"].startswith("k is 2")
    assert captures == [] and ui.out.msg_id == ""
