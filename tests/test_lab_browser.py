"""The live chapter in a real browser: JupyterLab (and the instructor view) from this project's .venv,
driven by Debian's Chromium through Playwright.

For every notebook in notebooks/ (found by globbing, so new sections are covered without edits):

* it opens unchanged (no "modified" mark before anything runs);
* Run All finishes and the saved notebook holds no error output (any reply that was not "ok" is
  named; if the page stops queueing cells with no error from the kernel, the rest is run from the
  first cell that did not run, and held to the same checks);
* saving writes the paired MyST ``.md`` (``jupytext.toml``) with the same cells as the source;
* every live control (``helpers.live``), moved one step, changes its output, and a move from the
  defaults never answers with an error: the controls offer valid values;
* every streaming output (``controls.stream_box``) shows its text growing token by token.

Which model: JupyterLab runs every notebook on the tiny second architecture of ``tests/second_model.py``
(no chat template, sliding-window layers, one KV head), with the chapter's claims reported, not asserted
(``MIC_CLAIMS=report``). The browser checks the live chapter's plumbing (cells, widgets, pairing, streams),
which does not depend on the model, and the tiny model keeps that check to seconds per notebook. The
default model's claims are asserted where they are measured on a quiet kernel, in the book build; on 2
cores shared with a browser, timing claims fail for the browser's sake, not the chapter's. The instructor
view (Voila, ``make present``) runs its notebook on the default model, live, and is checked the same way
on the streaming demo; so the live path on the real model stays covered. ``MIC_LAB_MODEL=default`` runs
the JupyterLab checks on the default model too (claims asserted), as a student would (about 15 minutes).
Works on copies in a temporary folder: the real notebooks are never touched.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from pathlib import Path

import pytest

from helpers.infra.messages import SCRIPT_FONTS
from mic_tools.editions import write_notebook_stylesheet

ROOT = Path(__file__).resolve().parents[1]
PY = Path(sys.executable)
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9]*.md"))
TOKEN = "mic-lab-test"
RUN_ALL_TIMEOUT_S = 900        # a notebook's budget is ~90 s on quiet cores; CI machines are busier
CONTROL_TIMEOUT_S = 240

# JupyterLab settings for a quiet, offline test: every cell stays in the page, no news, no update check.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                         "checkForUpdates": False},
}

# Records every text a streaming output shows, with its time, from the moment the page loads.
STREAM_LOG_JS = """
window.__micStream = [];
new MutationObserver(records => {
  const now = performance.now();
  for (const r of records) {
    const node = r.target.nodeType === 1 ? r.target : r.target.parentElement;
    const box = node && node.closest('.mic-stream');
    if (box) window.__micStream.push({t: now, text: box.textContent});
  }
}).observe(document, {subtree: true, childList: true, characterData: true});
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_http(url: str, proc: subprocess.Popen, what: str, timeout: float = 120):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with code {proc.returncode}; see its log above.")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"{what} did not answer on {url} within {timeout} s.")


def stop(proc: subprocess.Popen):
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def kernel_env() -> dict:
    env = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
    env.pop("MIC_STATIC", None)          # live controls must be live
    return env


LAB_MODEL = os.environ.get("MIC_LAB_MODEL", "second")       # "second" (the tiny architecture) or "default"
LAB_STREAM_SPREAD_MS = 0 if LAB_MODEL == "second" else 50


def lab_model_env(second_model_dir) -> dict:
    """The kernels' model for the JupyterLab checks: the tiny second architecture, claims reported (see above)."""
    if LAB_MODEL == "default":
        return {}
    if LAB_MODEL != "second":
        pytest.fail(f"MIC_LAB_MODEL={LAB_MODEL!r}: use 'second' (the tiny second architecture) or 'default'.")
    return {"MIC_MODEL": str(second_model_dir), "MIC_CLAIMS": "report"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """Copies of the sources and the jupytext configuration; the .ipynb prepared as `make lab` does."""
    d = tmp_path_factory.mktemp("live-chapter")
    shutil.copy(ROOT / "jupytext.toml", d)
    for name in NOTEBOOKS:
        shutil.copy(ROOT / "notebooks" / f"{name}.md", d)
    for edition, name in EDITION_NOTEBOOKS:
        (d / edition).mkdir(exist_ok=True)
        shutil.copy(ROOT / "notebooks" / edition / f"{name}.md", d / edition)
        subprocess.run([PY, ROOT / "scripts" / "lab-notebooks", d / edition], check=True)
    subprocess.run([PY, ROOT / "scripts" / "lab-notebooks", d], check=True)
    return d


@pytest.fixture(scope="module")
def lab(workdir, tmp_path_factory, second_model_dir):
    """JupyterLab from this environment on a free 127.0.0.1 port, with fresh settings and workspaces."""
    state = tmp_path_factory.mktemp("lab-state")
    for rel, value in LAB_SETTINGS.items():
        (state / "settings" / rel).parent.mkdir(parents=True, exist_ok=True)
        (state / "settings" / rel).write_text(json.dumps(value))
    write_notebook_stylesheet(state / "config" / "custom", "custom.css")     # as `make lab` does
    env = dict(kernel_env(), **lab_model_env(second_model_dir), JUPYTERLAB_SETTINGS_DIR=str(state / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(state / "workspaces"), JUPYTER_RUNTIME_DIR=str(state / "runtime"),
               JUPYTER_CONFIG_DIR=str(state / "config"))
    port = free_port()
    proc = subprocess.Popen([PY, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
                             f"--ServerApp.token={TOKEN}", f"--ServerApp.root_dir={workdir}",
                             "--ServerApp.allow_root=True", "--ServerApp.port_retries=0",
                             "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                             "--LabApp.custom_css=True"], cwd=workdir, env=env)
    url = f"http://127.0.0.1:{port}"
    wait_for_http(f"{url}/api/status?token={TOKEN}", proc, "JupyterLab")
    yield url
    stop(proc)


def api(url: str, path: str, method: str = "GET"):
    req = urllib.request.Request(f"{url}{path}?token={TOKEN}", method=method)
    with urllib.request.urlopen(req, timeout=30) as r:
        body = r.read()
    return json.loads(body) if body else None


# ------------------------------------------------------------------ what the page shows

IDLE_JS = """() => {
  const ind = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator');
  return !!ind && ind.getAttribute('data-status') === 'idle';
}"""
DIRTY_JS = "() => document.querySelectorAll('.lm-TabBar-tab.jp-mod-current.jp-mod-dirty').length > 0"
PROMPTS_JS = """() => Array.from(document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt'))
    .map(p => p.textContent.trim())"""

# What an output area shows: its text (plotly's toolbar left out) and every plotly figure's data and title.
OUTPUT_JS = """(el) => {
  const text = Array.from(el.querySelectorAll('.jp-OutputArea-output'))
      .map(o => { const c = o.cloneNode(true); c.querySelectorAll('.modebar-container').forEach(m => m.remove());
                  return c.textContent; }).join('\\n');
  const figs = Array.from(el.querySelectorAll('.js-plotly-plot')).map(gd => JSON.stringify([
      (gd.data || []).map(t => [t.visible, t.x, t.y, t.z, t.text]), gd.layout && gd.layout.title]));
  const errors = Array.from(el.querySelectorAll('[data-mime-type="application/vnd.jupyter.stderr"]'))
      .map(e => e.textContent).filter(t => /Traceback|Error|Exception/.test(t));
  return {shown: text + figs.join(''), errors, warning: text.includes('\\u26a0'), text: text.slice(0, 300)};
}"""


def wait_idle(page, timeout_s: float, what: str):
    """Wait until the kernel is idle and no cell is queued, twice in a row a second apart."""
    end = time.monotonic() + timeout_s
    calm = 0
    while time.monotonic() < end:
        busy = not page.evaluate(IDLE_JS) or any("*" in p for p in page.evaluate(PROMPTS_JS))
        calm = 0 if busy else calm + 1
        if calm >= 2:
            return
        page.wait_for_timeout(1000)
    pytest.fail(f"{what} did not finish within {timeout_s} s")


def run_menu(page, item: str):
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).click()


def stream_texts(page, since: float) -> list[tuple[float, str]]:
    log = page.evaluate("(since) => window.__micStream.filter(e => e.t >= since)", since)
    out = []
    for e in log:                             # keep the successive distinct texts
        if not out or out[-1][1] != e["text"]:
            out.append((e["t"], e["text"]))
    return out


def assert_streamed(texts: list[tuple[float, str]], what: str, spread_ms: float = 50):
    """Tokens appeared one after another: at least 3 successively longer texts, spread over ``spread_ms``.

    The tiny second model writes a whole reply in a fraction of a second, and a browser busy drawing may take
    its updates in one burst; in JupyterLab on that model (``LAB_STREAM_SPREAD_MS``) the texts must grow one
    update at a time, and the spread over time is checked on the default model, in the instructor view.
    """
    growing = [t for (t, s), (_, prev) in zip(texts[1:], texts) if len(s) > len(prev) and s.startswith(prev[:20])]
    assert len(growing) >= 3 and (growing[-1] - growing[0] > spread_ms if spread_ms else True), (
        f"{what}: the streaming output did not grow token by token "
        f"({len(texts)} texts seen: {[s[-60:] for _, s in texts[:6]]})")


def move(control, page, far: bool = False):
    """Move one ipywidgets control: one step, or (far) a long way. Returns (what was done, undo) or None."""
    sel = control.locator("select")
    if sel.count():
        n, current = sel.evaluate("s => s.options.length"), sel.evaluate("s => s.selectedIndex")
        if n < 2:
            return None
        new = (n - 1 if current != n - 1 else 0) if far else (current + 1) % n
        sel.select_option(index=new)
        return f"dropdown -> option {new + 1} of {n}", lambda: sel.select_option(index=current)
    handle = control.locator(".noUi-handle")
    if handle.count():
        readout = control.locator(".widget-readout")
        before = readout.inner_text()
        keys = ("End", "Home") if far else ("ArrowRight", "ArrowLeft")
        handle.first.focus()
        page.keyboard.press(keys[0])
        page.wait_for_timeout(200)
        if readout.inner_text() == before:      # already at that end
            keys = keys[::-1]
            page.keyboard.press(keys[0])

        def undo():
            handle.first.focus()
            readout.click()
            page.keyboard.press("Control+a")
            page.keyboard.type(before)
            page.keyboard.press("Enter")
        return f"slider {before} -> {readout.inner_text()}", undo
    box = control.locator("input[type=checkbox]")
    if box.count():
        box.first.click()
        return "checkbox toggled", lambda: box.first.click()
    for kind, field in (("number", control.locator("input[type=number]")),
                        ("text", control.locator("input[type=text], textarea"))):
        if field.count():
            value = field.first.input_value()
            if kind == "number":
                x = float(value)
                x = (x // 4 if far else x + 1) if "." not in value else (x / 4 if far else x + 1)
                new = str(int(x)) if "." not in value else str(x)
            else:
                new = "Hello there." if far else value + " Tell me more."

            def set_to(v, field=field):
                field.first.fill(v)
                field.first.press("Enter")
            set_to(new)
            return f"{kind} {value!r} -> {new!r}", lambda: set_to(value)
    return None


def settle(page, out, before, idle_js: str, timeout_s: float, quiet_polls: int | None = None):
    """The output once it has changed and settled (same twice in a row, kernel idle), or None.

    With ``quiet_polls``, also None as soon as the kernel has been idle that many polls in a row with the
    output unchanged: the move was handled and changed nothing (no need to wait out the timeout).
    """
    end = time.monotonic() + timeout_s
    last, quiet = None, 0
    while time.monotonic() < end:
        page.wait_for_timeout(400)
        after = out.evaluate(OUTPUT_JS)
        idle = page.evaluate(idle_js)
        if after["shown"] != before["shown"] and after == last and idle:
            return after
        quiet = quiet + 1 if idle and after["shown"] == before["shown"] else 0
        if quiet_polls and quiet >= quiet_polls:
            return None
        last = after
    return None


def exercise_controls(page, name: str, idle_js: str = IDLE_JS) -> list[str]:
    """Move every live control of the page; check each changes its output. Returns a report.

    A control is moved one step from its default; if that changes nothing (a cache window longer than
    the prompt, say), it is moved a long way instead. A combination of moves that answers with a
    one-line error (NF4 at 5 bits) is undone before the next control, so each starts from valid values.
    """
    report = []
    interacts = page.locator(".widget-interact")
    for i in range(interacts.count()):
        ui = interacts.nth(i)
        ui.scroll_into_view_if_needed()
        out = ui.locator(":scope > .widget-output")
        children = ui.locator(":scope > *:not(.widget-output)")
        for j in range(children.count()):
            t_control = time.monotonic()
            before = out.evaluate(OUTPUT_JS)
            since = page.evaluate("performance.now()")
            moved = move(children.nth(j), page)
            if moved is None:
                continue
            label = children.nth(j).locator(".widget-label").first
            label = label.inner_text() if label.count() else f"control {j}"
            after = settle(page, out, before, idle_js, 60, quiet_polls=6)
            if after is None:                                    # one step changed nothing: go far
                moved[1]()
                settle(page, out, {"shown": None}, idle_js, 60)
                before = out.evaluate(OUTPUT_JS)
                since = page.evaluate("performance.now()")
                moved = move(children.nth(j), page, far=True)
                after = settle(page, out, before, idle_js, CONTROL_TIMEOUT_S)
            done = moved[0]
            assert after is not None, f"{name}: moving '{label}' ({done}) did not change its output"
            assert not after["errors"], f"{name}: moving '{label}' ({done}) raised: {after['errors'][0][-800:]}"
            assert not (j == 0 and after["warning"]), (
                f"{name}: '{label}' moved from its default ({done}) answered with an error line: "
                f"{after['text']!r}; offer only valid values")
            streamed = ""
            if out.locator(".mic-stream").count():
                assert_streamed(stream_texts(page, since), f"{name}: after moving '{label}'", LAB_STREAM_SPREAD_MS)
                streamed = ", streamed token by token"
            if after["warning"]:                                  # an invalid combination: undo this move
                moved[1]()
                settle(page, out, after, idle_js, CONTROL_TIMEOUT_S)
                streamed += " (a one-line error for this combination; undone)"
            report.append(f"{name}: live control {i + 1}, '{label}': {done}; output changed{streamed} "
                          f"({time.monotonic() - t_control:.1f} s)")
    return report


def watch_replies(page) -> list[str]:
    """Every execute reply that was not "ok", as the browser received it: if Run All stops without an
    error output (the error went into a widget's output, or the kernel aborted the queue), this says why."""
    seen: list[str] = []

    def frame(payload):
        text = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else payload
        if '"execute_reply"' not in text:
            return
        status = re.search(r'"status"\s*:\s*"(\w+)"', text)
        if status and status.group(1) != "ok":
            bits = [re.search(rf'"{k}"\s*:\s*("(?:[^"\\]|\\.)*"|\d+)', text) for k in ("execution_count", "ename", "evalue")]
            seen.append(f"{status.group(1)}: " + ", ".join(b.group(0) for b in bits if b))

    page.on("websocket", lambda ws: ws.on("framereceived", frame))
    return seen


def open_notebook(browser, url: str, name: str):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.mic_replies = watch_replies(page)
    page.add_init_script(STREAM_LOG_JS)
    page.goto(f"{url}/lab/tree/{name}.ipynb?token={TOKEN}&reset", wait_until="load")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    wait_idle(page, 120, f"{name}: starting the kernel")
    return page


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_live_notebook_runs_saves_to_its_source_and_every_control_responds(browser, lab, workdir, name):
    run_live_notebook(browser, lab, workdir, name)


# An edition's notebook (issues 28, 29): the Hindi 02 sits in hi/, so its kernel prints Hindi (the edition comes from
# the notebook's folder). It runs, streams and saves as the English one does, and its controls answer in its
# language. The Urdu one also runs right to left: its Markdown and what `say` prints, not its code or printed tables.
EDITION_NOTEBOOKS = [("hi", "02-prefill-decode"), ("ur", "02-prefill-decode")]
SCRIPTS = {"hi": re.compile(r"[\u0900-\u097F]"), "ur": re.compile(r"[\u0600-\u06FF]")}
INTERACT_TEXTS_JS = """() => Array.from(document.querySelectorAll('.widget-interact > .widget-output'))
    .map(o => Array.from(o.querySelectorAll('.jp-OutputArea-output')).map(e => {
        const c = e.cloneNode(true); c.querySelectorAll('.modebar-container').forEach(m => m.remove());
        return c.textContent; }).join(' '))"""
DIRECTIONS_JS = """() => {
  const dir = sel => Array.from(document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) ' + sel))
      .map(e => getComputedStyle(e).direction);
  return {markdown: dir('.jp-MarkdownCell p'), headings: dir('.jp-MarkdownCell h2'),
          said: dir('.jp-OutputArea-output [lang="ur"] p'),
          code: dir('.jp-CodeCell .cm-content'),
          printed: dir('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stdout"] pre')};
}"""


@pytest.mark.parametrize("edition, name", EDITION_NOTEBOOKS)
def test_an_edition_notebook_runs_streams_and_its_controls_answer_in_its_language(browser, lab, workdir,
                                                                                 edition, name):
    def controls_answer_in_its_language(page):
        texts = [t for t in page.evaluate(INTERACT_TEXTS_JS) if len(re.findall(r"[^\W\d_]{3,}", t)) >= 4]
        assert texts, f"{edition}/{name}: no control printed a sentence"
        english = [t[:120] for t in texts if not SCRIPTS[edition].search(t)]
        assert not english, f"{edition}/{name}: controls answered in English: {english}"
        if edition == "ur":
            seen = page.evaluate(DIRECTIONS_JS)
            assert all(seen[k] for k in seen), f"{edition}/{name}: nothing of some kind to check: {seen}"
            rtl, ltr = ("markdown", "headings", "said"), ("code", "printed")
            assert {d for k in rtl for d in seen[k]} == {"rtl"} and {d for k in ltr for d in seen[k]} == {"ltr"}, seen
    run_live_notebook(browser, lab, workdir, f"{edition}/{name}", controls_answer_in_its_language)


def run_live_notebook(browser, lab, workdir, name: str, check_page=None):
    """Run All in JupyterLab, then save and move every control (see the test above); ``check_page(page)`` last."""
    t0 = time.monotonic()
    md = workdir / f"{name}.md"
    md_before = md.read_text()
    mtime = md.stat().st_mtime
    page = open_notebook(browser, lab, name)
    page.wait_for_timeout(1500)
    assert not page.evaluate(DIRTY_JS), f"{name} opens already marked as changed"

    run_menu(page, "Run All Cells")
    page.wait_for_function("() => document.querySelector('.jp-CodeCell .jp-InputArea-prompt') !== null")
    page.wait_for_timeout(2000)
    wait_idle(page, RUN_ALL_TIMEOUT_S, f"{name}: Run All")
    nb = save_and_read(page, workdir, name)
    unrun = unrun_cells(nb)
    if unrun and not page.mic_replies:
        # The kernel reported no error, yet the page stopped queueing cells: the page lost track of
        # the kernel's replies (seen once in CI, never here). Say so, then run the rest from the first
        # cell that did not run, as a reader would, and hold those cells to the same checks.
        print(f"\n{name}: Run All stopped before cell {unrun[0]} with no error from the kernel; "
              f"running the rest. {describe_stop(page, nb)}")
        page.locator(".jp-Notebook .jp-Cell").nth(unrun[0]).locator(".jp-InputPrompt").click()
        run_menu(page, "Run Selected Cell and All Below")
        page.wait_for_timeout(2000)
        wait_idle(page, RUN_ALL_TIMEOUT_S, f"{name}: running the rest")
        nb = save_and_read(page, workdir, name)
        unrun = unrun_cells(nb)
    t_run = time.monotonic() - t0
    errors = [(c["source"][:200], o) for c in nb["cells"] if c["cell_type"] == "code"
              for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert not errors, f"{name}: Run All left an error: {errors[0][1]['ename']}: {errors[0][1]['evalue']} " \
                       f"in the cell starting {errors[0][0]!r}"
    assert not unrun, f"{name}: Run All stopped before {''.join(nb['cells'][unrun[0]]['source'])[:80]!r}; " \
                      f"{describe_stop(page, nb)}"
    assert md.stat().st_mtime > mtime, f"saving {name}.ipynb did not write {name}.md: is jupytext.toml pairing?"
    assert body(md.read_text()) == body(md_before), f"saving {name} changed its .md beyond the header"

    if page.locator(".mic-stream").count():            # streaming outputs streamed during Run All too
        assert_streamed(stream_texts(page, 0), f"{name}: Run All", LAB_STREAM_SPREAD_MS)
    report = exercise_controls(page, name)
    if check_page:
        check_page(page)
    page.close()
    for s in api(lab, "/api/sessions"):                 # free the kernel's memory for the next notebook
        api(lab, f"/api/sessions/{s['id']}", "DELETE")
    print(f"\n{name}: Run All {t_run:.0f} s, with controls {time.monotonic() - t0:.0f} s; "
          f"{len(report)} live controls moved")
    print("\n".join(report))


def save_and_read(page, workdir: Path, name: str) -> dict:
    page.keyboard.press("Control+s")
    page.wait_for_function(f"() => !({DIRTY_JS})()", timeout=60_000)
    return json.loads((workdir / f"{name}.ipynb").read_text())


def unrun_cells(nb: dict) -> list[int]:
    return [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code" and c["execution_count"] is None]


def describe_stop(page, nb: dict) -> str:
    """The kernel's replies that were not ok, and what the last cell that ran shows."""
    ran = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code" and c["execution_count"]]
    shown = page.locator(".jp-Notebook .jp-Cell").nth(ran[-1]).evaluate(OUTPUT_JS)["text"] if ran else ""
    return f"replies that were not ok: {page.mic_replies}; the last cell that ran shows: {shown!r}"


def body(md_text: str) -> str:
    """A MyST notebook without its YAML header (jupytext may write the header in block style)."""
    return md_text.split("\n---\n", 1)[1] if md_text.startswith("---\n") else md_text


# ------------------------------------------------------------------ the instructor view (Voila)

INSTRUCTOR = ROOT / "instructor"   # voila/templates/room: Voila's lab template, large, no code; voila.py: its settings
PRESENTED = [n for n in NOTEBOOKS if "stream_box" in (ROOT / "notebooks" / f"{n}.md").read_text()] or NOTEBOOKS[:1]


# English, and Urdu: right to left, in Nastaliq, the edition whose room view differs most. (Hindi's notebook runs,
# streams and answers in Hindi in JupyterLab, test_an_edition_notebook_runs_streams_and_its_controls_answer_in_its_
# language; the room view adds nothing for it that Urdu's does not check, and each view costs 85 s of make test.)
@pytest.fixture(scope="module", params=[PRESENTED[0], f"ur/{PRESENTED[0]}"])
def voila(workdir, request):
    """`make present` for one notebook (`make present NB=02 ED=hi` for the Hindi one): Voila with the room
    template on a free 127.0.0.1 port. Returns (url, notebook)."""
    port = free_port()
    edition = request.param.split("/")[0] if "/" in request.param else "en"
    env = dict(kernel_env(), JUPYTER_PATH=str(INSTRUCTOR), JUPYTER_CONFIG_PATH=str(INSTRUCTOR), MIC_EDITION=edition,
               **PRESENT_ENV)
    proc = subprocess.Popen([PY, "-m", "voila", f"{request.param}.ipynb", *VOILA_ARGS, f"--port={port}"],
                            cwd=workdir, env=env)
    url = f"http://127.0.0.1:{port}"
    wait_for_http(f"{url}/voila/static/voila.js", proc, "Voila")      # a static file: does not start a kernel
    yield url, request.param
    stop(proc)


# the same flags and settings as `make present` (Makefile): claims are reported, since Voila stops at the first
# cell that raises, and a timing claim measured beside a browser on 2 cores can fail for the browser's sake
VOILA_ARGS = ["--template=room", "--no-browser", "--show_tracebacks=True",
              "--Voila.ip=127.0.0.1"]
PRESENT_ENV = {"MIC_CLAIMS": "report"}


def open_instructor_view(browser, url: str, name: str, console: list, outside: list, t0: float):
    """Load the page, which makes Voila run the notebook; returns (page, ok). Not ok: the browser lost a widget
    model ('Error displaying widget: model not found': 2 of 17 loads, nothing wrong in the kernel, before
    instructor/voila.py left out jupytext's extension, whose loading failed in the browser on every load)."""
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    page.add_init_script(STREAM_LOG_JS)
    page.on("request", lambda r: outside.append(r.url) if not r.url.startswith(
        ("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:")) else None)
    page.on("console", lambda m: console.append(f"{time.monotonic() - t0:.0f} s {m.type}: {m.text[:300]}"))
    page.goto(url, wait_until="load", timeout=RUN_ALL_TIMEOUT_S * 1000)
    # Voila runs the whole notebook (a spinner counts the cells), then shows it with a live kernel
    page.wait_for_function("() => !document.querySelector('#loading')", timeout=RUN_ALL_TIMEOUT_S * 1000)
    try:
        page.wait_for_function("""() => document.querySelector('.widget-interact .mic-stream') ||
            document.body.innerText.includes('model not found')""", timeout=300_000)
    except Exception:
        pass
    if page.locator(".widget-interact .mic-stream").count():
        return page, True
    shown = page.evaluate("() => document.body.innerText")
    if "model not found" not in shown:
        pytest.fail(f"{name} in the instructor view never showed its streaming demo; the page ends with: "
                    f"{shown[-600:]!r}; the browser's console said: {console[-25:]}")
    return page, False


def test_instructor_view_shows_outputs_and_controls_large_without_code_and_streams(browser, voila):
    voila, name = voila
    t0 = time.monotonic()
    outside, console = [], []
    page, ok = open_instructor_view(browser, voila, name, console, outside, t0)
    if not ok:
        # What an instructor would do: reload, which runs the notebook again. Twice in a row fails. The warning
        # shows in pytest's summary, so a reload in CI is on record.
        warnings.warn(f"{name} in the instructor view showed 'Error displaying widget: model not found' after "
                      f"{time.monotonic() - t0:.0f} s; reloading once. The browser's console said: {console[-25:]}")
        page.close()
        del console[:]                    # the console checked below is the reloaded page's
        page, ok = open_instructor_view(browser, voila, name, console, outside, t0)
        assert ok, (f"{name} in the instructor view showed 'model not found' twice in a row; the browser's "
                    f"console said the second time: {console[-25:]}")
    t_run = time.monotonic() - t0
    assert page.locator(".cm-editor, .jp-InputArea-editor").count() == 0, "the instructor view shows code"
    errors = page.evaluate("""() => Array.from(document.querySelectorAll(
        '[data-mime-type="application/vnd.jupyter.stderr"]')).map(e => e.textContent)
        .filter(t => /Traceback|Error|Exception/.test(t))""")
    assert not errors, f"{name} in the instructor view shows an error: {errors[0][-800:]}"
    sizes = page.evaluate("""() => ['.jp-RenderedMarkdown p', '.widget-label', '.mic-stream .widget-html-content']
        .map(s => document.querySelector(s)).filter(e => e).map(e => parseFloat(getComputedStyle(e).fontSize))""")
    assert len(sizes) == 3 and min(sizes) >= 19, f"text is not large enough for a room: {sizes} px"
    assert page.locator(".js-plotly-plot").count() > 0, "the instructor view shows no figures"
    # the exercises show as boxes, without their directive lines; no solution is shown to the room
    source = (ROOT / "notebooks" / f"{name}.md").read_text(encoding="utf8")
    assert page.locator(".mic-exercise").count() == len(re.findall(r"^```\{exercise\}", source, re.M)) > 0
    shown = page.locator("#rendered_cells").inner_text()
    assert ":label:" not in shown and "{exercise}" not in shown and "solution-start" not in shown
    assert "Solution to" not in shown and "✔ Exercise" not in shown, "the instructor view shows a solution"
    # move the streaming demo's controls: the reply appears token by token, live
    demo = page.locator(".widget-interact", has=page.locator(".mic-stream"))
    demo.evaluate("el => el.setAttribute('data-mic-demo', '1')")
    report = []
    controls = page.locator("[data-mic-demo] > *:not(.widget-output)")
    for j in range(controls.count()):
        out = page.locator("[data-mic-demo] > .widget-output")
        before = out.evaluate(OUTPUT_JS)
        since = page.evaluate("performance.now()")
        done = move(controls.nth(j), page)[0]
        end = time.monotonic() + CONTROL_TIMEOUT_S
        last = None
        while True:
            page.wait_for_timeout(700)
            after = out.evaluate(OUTPUT_JS)
            if after["shown"] != before["shown"] and after == last:
                break
            last = after
            assert time.monotonic() < end, f"instructor view: moving {done} did not change the stream demo"
        assert not after["errors"] and not after["warning"], f"instructor view: {done} gave {after['text']!r}"
        assert_streamed(stream_texts(page, since), f"instructor view of {name}, {done} (stream log: "
                        f"{page.evaluate('window.__micStream.length')} entries in all, since {since:.0f} ms; "
                        f"{page.locator('.mic-stream').count()} stream boxes)")
        report.append(f"instructor view ({name}): {done}; the reply streamed token by token")
    if "/" in name:                                 # an edition's notebook: its script, in the font the view serves
        edition = name.split("/")[0]
        said = page.locator(".jp-RenderedMarkdown").nth(1).inner_text()
        assert SCRIPTS[edition].search(said), f"the {edition} instructor view shows {said[:120]!r}"
        family = SCRIPT_FONTS[edition]
        fonts = page.evaluate("""(family) => document.fonts.ready.then(() => Array.from(document.fonts)
            .filter(f => f.family.replace(/"/g, '') === family).map(f => f.status))""", family)
        assert "loaded" in fonts, f"the instructor view's {family}: {fonts}"
        if edition == "ur":                         # right to left, but not the stream's printed reply or figures
            dirs = page.evaluate("""() => ['.jp-MarkdownCell .jp-RenderedMarkdown p', '.jp-MarkdownCell h2',
                '[lang="ur"] p', '.js-plotly-plot'].map(s => document.querySelector(s))
                .map(e => e && getComputedStyle(e).direction)""")
            assert dirs == ["rtl", "rtl", "rtl", "ltr"], f"the Urdu instructor view's directions: {dirs}"
    assert not outside, f"the instructor view asks the internet for {outside[:3]}"
    errors = [c for c in console if " error: " in c]
    assert not errors, f"the instructor view's browser console shows errors: {errors[:3]}"
    page.close()
    print(f"\ninstructor view of {name}: page complete after {t_run:.0f} s, total {time.monotonic() - t0:.0f} s")
    print("\n".join(report))
