"""Open the built book in a real headless Chromium and check that the figures draw and the sliders work.

Needs `make book` first (the `make test` target builds it) and Debian's chromium. The check that every
figure draws its data where its axes put it also runs on figures made here, with no book built.
"""
import contextlib
import functools
import http.server
import os
import shutil
import threading
from pathlib import Path

import pytest

# MIC_BOOK_SITE checks a site built (or copied) elsewhere
SITE = Path(os.environ.get("MIC_BOOK_SITE") or Path(__file__).resolve().parents[1] / "book" / "_build" / "html")
# the English site's chapter pages, and each edition's (book/_build/html/hi/notebooks/...): every check runs on both
SITES = [SITE, *sorted(d for d in SITE.iterdir() if (d / "notebooks").is_dir())] if SITE.exists() else []
PAGES = sorted(p.relative_to(SITE).as_posix() for site in SITES for p in (site / "notebooks").glob("*.html"))

needs_site = pytest.mark.skipif(not SITE.exists(), reason="build the book first: make book")


@contextlib.contextmanager
def serve(folder: Path):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass
    handler = functools.partial(Quiet, directory=str(folder))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()


@pytest.fixture(scope="module")
def server():
    with serve(SITE) as url:
        yield url


# pydata-sphinx-theme logs this when no colour mode was stored yet; it is not an error of ours.
BENIGN_CONSOLE = {"Got invalid theme mode: . Resetting to auto."}


def open_page(browser, url, width: int = 1300):
    page = browser.new_page(viewport={"width": width, "height": 900})
    problems = []
    page.on("pageerror", lambda e: problems.append(f"JavaScript error: {e}"))
    page.on("console", lambda m: problems.append(f"console error: {m.text}")
            if m.type == "error" and m.text not in BENIGN_CONSOLE
            and not m.text.startswith("Failed to load resource") else None)   # reported with its URL below
    page.on("requestfailed", lambda r: problems.append(f"failed request: {r.url}"))
    # the browser asks for /favicon.ico on its own; the site has none
    page.on("response", lambda r: problems.append(f"HTTP {r.status}: {r.url}")
            if r.status >= 400 and not r.url.endswith("/favicon.ico") else None)
    page.goto(url, wait_until="load")
    return page, problems


# Each chapter page is opened once, and everything the checks below assert is measured in that one visit, in an
# order that changes nothing a later measurement reads: figures drawn, their texts, their data, then every control
# moved, then the window narrowed to 1280 px and the solutions unfolded for the code. (Five visits of each of the
# 30 pages, one per check, took a quarter of make test's browser time.) pytest-xdist's --dist loadfile keeps a
# file's tests in one process, so each page's visit is shared by its five checks.
_VISITS: dict[str, dict] = {}
DRAWN_JS = """() => Array.from(document.querySelectorAll('div.mic-plotly')).map(
    d => d.querySelectorAll('svg.main-svg g.trace, svg.main-svg g.hm, svg.main-svg image').length)"""
STATE_JS = """(id) => { const gd = document.getElementById(id);
    return JSON.stringify([gd.data.map(t => [t.visible, t.x, t.y, t.z]), gd.layout.title && gd.layout.title.text]); }"""


def visit(server, browser, path: str) -> dict:
    """What one visit of a chapter page measured (see above)."""
    if path in _VISITS:
        return _VISITS[path]
    page, problems = open_page(browser, f"{server}/{path}")
    seen = {"figures": page.locator("div.mic-plotly").count()}
    try:
        page.wait_for_function(f"() => ({DRAWN_JS})().every(k => k > 0)", timeout=60_000)
    except Exception:
        pass
    seen["drawn"] = page.evaluate(DRAWN_JS)
    seen["external"] = page.evaluate("""() => Array.from(document.querySelectorAll('script[src], link[href]'))
        .map(e => e.src || e.href).filter(u => u && !u.startsWith(location.origin))""")
    if page.locator("span.math, div.math").count():      # maths is typeset by the site's own MathJax
        page.wait_for_function("() => document.querySelectorAll('mjx-container').length > 0", timeout=60_000)
    seen["plotly_scripts"] = page.evaluate(
        "() => Array.from(document.scripts).map(s => s.src).filter(s => s.includes('plotly'))")
    wait_for_figures(page)
    seen["texts"] = {f["id"]: found for f in page.evaluate(FIGURE_TEXTS_JS) if (found := text_problems(f))}
    seen["off_axes"], seen["checked"] = data_off_axes(page)
    seen["sliders"], seen["moved_off_axes"] = {}, []
    ids = page.evaluate("() => Array.from(document.querySelectorAll('div.mic-plotly'))"
                        ".filter(d => d.querySelector('.slider-container, .updatemenu-container')).map(d => d.id)")
    for fig_id in ids:
        before, changed = page.evaluate(STATE_JS, fig_id), False
        for move in move_controls(page, fig_id):
            changed = changed or (move.startswith("slider") and page.evaluate(STATE_JS, fig_id) != before)
            bad, _ = data_off_axes(page, [fig_id])
            if bad:
                seen["moved_off_axes"].append(f"{fig_id}, {move}: {first(bad)}")
        if page.locator(f"#{fig_id} .slider-container").count():
            seen["sliders"][fig_id] = changed
    seen["problems"] = list(problems)
    page.set_viewport_size({"width": 1280, "height": 900})
    seen["code_blocks"] = page.locator("div.cell_input pre").count()
    # solutions open, as a reader who unfolds them sees their code (a folded one is laid out otherwise)
    page.evaluate("() => document.querySelectorAll('.toggle-hidden').forEach(e => e.classList.remove('toggle-hidden'))")
    seen["code_over"] = page.evaluate(CODE_LINES_JS)
    page.close()
    _VISITS[path] = seen
    return seen


@needs_site
def test_every_chapter_page_was_built():
    assert "notebooks/01-kv-cache.html" in PAGES


@needs_site
@pytest.mark.parametrize("path", PAGES)
def test_figures_draw_without_errors(server, browser, path):
    seen = visit(server, browser, path)
    assert seen["figures"] > 0, f"{path} has no figures"
    assert len(seen["drawn"]) == seen["figures"] and all(k > 0 for k in seen["drawn"]), (
        f"figures without drawn traces on {path}: {seen['drawn']}")
    assert not seen["external"], f"the page asks the internet for {seen['external']}"
    # plotly.js came from the site itself, once
    scripts = seen["plotly_scripts"]
    assert len(scripts) == 1 and scripts[0].startswith(server), scripts
    assert not seen["problems"], seen["problems"]


# Every visible text element of every figure, with its box, in page pixels.
FIGURE_TEXTS_JS = """() => Array.from(document.querySelectorAll('div.mic-plotly')).map(div => {
  const fig = div.getBoundingClientRect();
  const texts = Array.from(div.querySelectorAll('svg.main-svg text')).filter(t => {
    if (!t.textContent.trim() || t.closest('.hoverlayer, .modebar')) return false;
    const st = getComputedStyle(t);
    if (st.display === 'none' || st.visibility === 'hidden' || parseFloat(st.opacity) === 0) return false;
    if (/rgba\\(.*,\\s*0\\)$/.test(st.fill)) return false;          // transparent: drawn but not seen
    for (let e = t; e && e !== div; e = e.parentElement) {
      const s = getComputedStyle(e);
      if (s.display === 'none' || parseFloat(s.opacity) === 0) return false;
    }
    const r = t.getBoundingClientRect();
    return r.width > 0 && r.height > 0;
  }).map(t => { const r = t.getBoundingClientRect(), m = t.getScreenCTM();
                return {text: t.textContent.trim().slice(0, 60), l: r.left, r: r.right, t: r.top, b: r.bottom,
                        rotated: !!m && Math.abs(m.b) > 1e-3}; });
  return {id: div.id, box: {l: fig.left, r: fig.right, t: fig.top, b: fig.bottom}, texts};
})"""


def text_problems(figure: dict, slack: float = 2.0) -> list[str]:
    """Texts that stick out of their figure, or that overlap each other by more than ``slack`` pixels."""
    box, texts, found = figure["box"], figure["texts"], []
    for a in texts:
        if a["l"] < box["l"] - slack or a["r"] > box["r"] + slack or a["t"] < box["t"] - slack or a["b"] > box["b"] + slack:
            found.append(f"clipped: {a['text']!r}")
    for i, a in enumerate(texts):
        for b in texts[i + 1:]:
            if a.get("rotated") and b.get("rotated"):
                continue      # slanted tick labels: their boxes overlap though the glyphs do not
            w = min(a["r"], b["r"]) - max(a["l"], b["l"])
            h = min(a["b"], b["b"]) - max(a["t"], b["t"])
            if w > slack and h > slack:
                found.append(f"overlap: {a['text']!r} and {b['text']!r}")
    return found


def test_text_problems_finds_overlap_and_clipping():
    fig = {"box": {"l": 0, "r": 100, "t": 0, "b": 100}, "texts": [
        {"text": "a", "l": 10, "r": 40, "t": 10, "b": 20}, {"text": "b", "l": 30, "r": 60, "t": 12, "b": 22},
        {"text": "c", "l": 90, "r": 130, "t": 50, "b": 60}, {"text": "d", "l": 10, "r": 40, "t": 30, "b": 40}]}
    assert text_problems(fig) == ["clipped: 'c'", "overlap: 'a' and 'b'"]


@needs_site
@pytest.mark.parametrize("path", PAGES)
def test_figure_texts_neither_clip_nor_overlap(server, browser, path):
    """Titles cut at the right edge, labels drawn over each other, sliders over axis titles: all fail here."""
    bad = visit(server, browser, path)["texts"]
    assert not bad, f"{path}: figure text clipped or overlapping: {bad}"


# Every line of every code cell, measured against the box it is shown in: the box's width inside its padding, and
# the line's width in the box's own font (a canvas measures the text as the page sets it). Issue 37: code written
# 120 columns wide ran past its box on 2,151 of 4,597 lines at a 1280 px window, so a reader scrolled sideways.
CODE_LINES_JS = """() => {
  const ctx = document.createElement('canvas').getContext('2d');
  return Array.from(document.querySelectorAll('div.cell_input pre')).flatMap(pre => {
    const st = getComputedStyle(pre);
    ctx.font = st.font;
    const room = pre.clientWidth - parseFloat(st.paddingLeft) - parseFloat(st.paddingRight);
    return pre.textContent.split('\\n').filter(l => l.trim())
      .map(l => ({line: l, width: ctx.measureText(l).width, room: room}))
      .filter(l => l.width > l.room + 0.5);
  });
}"""


@needs_site
@pytest.mark.parametrize("path", PAGES)
def test_no_code_line_runs_past_its_box_at_1280_px(server, browser, path):
    seen = visit(server, browser, path)
    assert seen["code_blocks"] > 0, f"{path} shows no code"
    over = seen["code_over"]
    assert not over, f"{path}: {len(over)} code lines wider than their box, e.g. {over[:3]}"


@needs_site
def test_no_widget_state_or_widget_views_on_static_pages():
    """A progress bar or control built during the book build would embed widget state and CDN loaders."""
    for rel in PAGES:
        html = (SITE / rel).read_text(encoding="utf-8")
        for marker in ("application/vnd.jupyter.widget-state+json", "application/vnd.jupyter.widget-view+json",
                       "require.min.js", "embed-amd.js"):
            assert marker not in html, f"{rel} carries {marker}"


@needs_site
@pytest.mark.parametrize("path", PAGES)
def test_sliders_change_the_figure(server, browser, path):
    """Each slider, moved to its far end and back to its start, changes what its figure shows at least once."""
    sliders = visit(server, browser, path)["sliders"]
    if not sliders:
        pytest.skip(f"{path} has no slider figures")
    still = [fig_id for fig_id, changed in sliders.items() if not changed]
    assert not still, f"moving the sliders of {still} on {path} changed nothing"


# ---------------------------------------------------------------------------------------------------------
# Data where its axes put it. For every drawn trace of every figure: where plotly's own mapping of a value
# (the axis' c2p, plus the axis' _offset in the figure) says a data point belongs, against where the page
# draws it (the SVG element's geometry through its screen matrix). Markers, lines (every data point inside
# the plot lies on the drawn line), bars (the value end and the middle), heatmaps (the image's corners),
# error bars (both ends), grid lines (each where its axis maps its value); any other trace type on cartesian
# axes: its drawing frame. Nothing is found by its text, so the check reads the same in any language.
# Issue 25: plotly.js left the traces' layer at the first top margin while the axes moved down with the
# title's automargin, and 13 traces were drawn 7-38 px off.
ALIGNMENT_JS = """(ids) => {
  const TOL = 2;
  const apply = (m, x, y) => [m.a * x + m.c * y + m.e, m.b * x + m.d * y + m.f];
  const fin = v => typeof v === 'number' && isFinite(v);
  const xy = p => '(' + p.map(v => v.toFixed(1)).join(', ') + ')';
  const figures = Array.from(document.querySelectorAll('div.mic-plotly')).filter(d => !ids || ids.includes(d.id));
  return figures.map(gd => {
    const report = {id: gd.id, checked: {}, problems: []};
    const fl = gd._fullLayout, svg = gd.querySelector('svg.main-svg');
    if (!fl || !svg || !gd._fullData) { report.problems.push('not drawn'); return report; }
    const screen = svg.getScreenCTM();
    const count = kind => { report.checked[kind] = (report.checked[kind] || 0) + 1; };
    // grid lines: each where its axis maps its value
    for (const el of gd.querySelectorAll('path.xgrid, path.ygrid')) {
      const d = el.__data__, id = el.parentNode.getAttribute('class') || '';
      const ax = /^[xy][0-9]*$/.test(id) && fl[id.charAt(0) + 'axis' + id.slice(1)];
      if (!d || !ax || !fin(ax.l2p(d.x))) continue;
      const k = id.charAt(0) === 'x' ? 0 : 1, at = ax._offset + ax.l2p(d.x);
      const got = apply(el.getScreenCTM(), 0, 0)[k], want = apply(screen, at, at)[k];
      count('grid line');
      if (Math.abs(got - want) > TOL) report.problems.push(id + ' axis: the grid line at ' + d.text + ' is ' +
        (got - want).toFixed(1) + ' px from where the axis maps it');
    }
    const groups = new Map();
    for (const g of gd.querySelectorAll('g.trace, g.hm, g.contour')) {
      const cd = g.__data__, trace = Array.isArray(cd) && cd[0] && cd[0].trace;
      if (trace && trace.visible === true && !groups.has(trace.index)) groups.set(trace.index, [g, cd, trace]);
    }
    for (const trace of gd._fullData) {
      const sub = trace.visible === true && fl._plots && fl._plots[(trace.xaxis || 'x') + (trace.yaxis || 'y')];
      if (!sub) continue;                                      // hidden, or not on cartesian axes
      const name = 'trace ' + trace.index + ' (' + trace.type + (trace.name ? ' "' + trace.name + '"' : '') + ')';
      if (!groups.has(trace.index)) { report.problems.push(name + ' is visible but not drawn'); continue; }
      const [g, cd] = groups.get(trace.index);
      const xa = sub.xaxis, ya = sub.yaxis;
      const inside = (px, py) => fin(px) && fin(py) && px >= -1 && px <= xa._length + 1 && py >= -1 && py <= ya._length + 1;
      const want = (px, py) => apply(screen, xa._offset + px, ya._offset + py);   // a subplot pixel on the page
      let checks = 0, expected = 0;
      const compare = (kind, got, exp, what) => {
        checks++; count(kind);
        if (Math.abs(got[0] - exp[0]) > TOL || Math.abs(got[1] - exp[1]) > TOL)
          report.problems.push(name + ' ' + what + ': drawn at ' + xy(got) + ', its axes put it at ' + xy(exp));
      };
      if (trace.type === 'scatter') {
        for (const p of g.querySelectorAll('g.points path.point')) {
          const d = p.__data__, px = d && xa.c2p(d.x), py = d && ya.c2p(d.y);
          if (inside(px, py)) compare('marker', apply(p.getScreenCTM(), 0, 0), want(px, py), 'marker at x=' + d.x + ', y=' + d.y);
        }
        // the drawn line (or, with no line, the fill's edge), sampled every pixel along its length
        let paths = g.querySelectorAll('path.js-line');
        if (!paths.length) paths = g.querySelectorAll('path.js-fill');
        const columns = new Map();
        for (const path of paths) {
          const m = path.getScreenCTM(), length = path.getTotalLength();
          for (let s = 0; s <= length + 1; s += 1) {
            const q = path.getPointAtLength(Math.min(s, length)), at = apply(m, q.x, q.y), k = Math.round(at[0]);
            if (!columns.has(k)) columns.set(k, []);
            columns.get(k).push(at);
          }
        }
        for (const d of columns.size ? cd : []) {
          const px = xa.c2p(d.x), py = ya.c2p(d.y);
          if (!inside(px, py)) continue;
          const exp = want(px, py);
          let best = Infinity;
          for (let k = Math.round(exp[0]) - TOL - 1; k <= Math.round(exp[0]) + TOL + 1; k++)
            for (const at of columns.get(k) || []) best = Math.min(best, Math.hypot(at[0] - exp[0], at[1] - exp[1]));
          checks++; count('line');
          if (!(best <= TOL)) report.problems.push(name + ' line passes ' + (fin(best) ? best.toFixed(1) :
            'more than ' + (TOL + 1)) + ' px from its point x=' + d.x + ', y=' + d.y + ' at ' + xy(exp));
        }
        expected = cd.filter(d => inside(xa.c2p(d.x), ya.c2p(d.y))).length;
      } else if (trace.type === 'bar' || trace.type === 'histogram') {
        const across = trace.orientation === 'h', pa = across ? ya : xa, sa = across ? xa : ya;
        for (const p of g.querySelectorAll('g.point path')) {
          const d = p.__data__;
          if (!d) continue;
          const p0 = pa.c2p(d.p0), p1 = pa.c2p(d.p1), s0 = sa.c2p(d.s0), s1 = sa.c2p(d.s1);
          if (!fin(p0) || !fin(p1) || !fin(s1) || s1 < -1 || s1 > sa._length + 1) continue;
          expected++;
          const box = p.getBBox(), m = p.getScreenCTM();
          if (box.width === 0 && box.height === 0) {
            if (!fin(s0) || Math.abs(s1 - s0) >= 1) report.problems.push(name + ' bar at ' + d.p + ' is not drawn');
            continue;
          }
          // the value's end of the bar (away from its base) and the middle of its width
          const lo = across ? box.x : box.y, hi = across ? box.x + box.width : box.y + box.height;
          const end = (fin(s0) ? s1 >= s0 : across) ? hi : lo;
          const mid = across ? box.y + box.height / 2 : box.x + box.width / 2;
          compare('bar', across ? apply(m, end, mid) : apply(m, mid, end),
                  across ? want(s1, (p0 + p1) / 2) : want((p0 + p1) / 2, s1), 'bar at ' + d.p + ' (value ' + d.s1 + ')');
        }
      } else if (trace.type === 'heatmap') {
        const img = g.querySelector('image'), c0 = cd[0];
        expected = 1;
        if (img && c0 && c0.z && c0.z.length) {
          const edges = (c, n) => c.length === n + 1 ? [c[0], c[n]] :
            [c[0] - (c[1] - c[0]) / 2, c[n - 1] + (c[n - 1] - c[n - 2]) / 2];
          const ex = edges(c0.x, c0.z[0].length).map(v => xa.c2p(v)), ey = edges(c0.y, c0.z.length).map(v => ya.c2p(v));
          // the image's corners and the outer cells' edges, both in subplot pixels and cut to the plot
          const inv = screen.inverse(), box = img.getBBox(), m = img.getScreenCTM();
          const cut = (v, n) => Math.min(Math.max(v, 0), n);
          const drawn = [[box.x, box.y], [box.x + box.width, box.y + box.height]].map(([x, y]) => apply(m, x, y))
            .map(([x, y]) => apply(inv, x, y)).map(([x, y]) => [cut(x - xa._offset, xa._length), cut(y - ya._offset, ya._length)]);
          const gx = [drawn[0][0], drawn[1][0]].sort((a, b) => a - b), gy = [drawn[0][1], drawn[1][1]].sort((a, b) => a - b);
          const wx = ex.map(v => cut(v, xa._length)).sort((a, b) => a - b), wy = ey.map(v => cut(v, ya._length)).sort((a, b) => a - b);
          compare('heatmap', want(gx[0], gy[0]), want(wx[0], wy[0]), 'image, top left corner');
          compare('heatmap', want(gx[1], gy[1]), want(wx[1], wy[1]), 'image, bottom right corner');
        }
      } else {
        expected = 1;                                          // contour lines and the like: the drawing frame
        compare('frame', apply(g.getScreenCTM(), 0, 0), want(0, 0), 'drawing frame (its 0, 0)');
      }
      for (const eb of g.querySelectorAll('g.errorbar')) {
        const d = eb.__data__;
        for (const [cls, ax, ends, at] of [['path.yerror', ya, d && [d.yh, d.ys], d && d.x], ['path.xerror', xa, d && [d.xh, d.xs], d && d.y]]) {
          const p = eb.querySelector(cls);
          if (!p || !fin(ends[0]) || !fin(ends[1])) continue;
          const up = cls === 'path.yerror', c = (up ? xa : ya).c2p(at);
          const e = ends.map(v => ax.c2p(v)).sort((a, b) => a - b);
          if (!fin(c) || !fin(e[0]) || !fin(e[1]) || e[0] < -1 || e[1] > ax._length + 1) continue;
          const box = p.getBBox(), m = p.getScreenCTM();
          if (up) {
            compare('error bar', apply(m, box.x + box.width / 2, box.y), want(c, e[0]), 'error bar at x=' + at + ', top');
            compare('error bar', apply(m, box.x + box.width / 2, box.y + box.height), want(c, e[1]), 'error bar at x=' + at + ', bottom');
          } else {
            compare('error bar', apply(m, box.x, box.y + box.height / 2), want(e[0], c), 'error bar at y=' + at + ', left');
            compare('error bar', apply(m, box.x + box.width, box.y + box.height / 2), want(e[1], c), 'error bar at y=' + at + ', right');
          }
        }
      }
      if (expected > 0 && checks === 0) report.problems.push(name + ' has data inside the plot, but nothing drawn of it was found');
    }
    return report;
  });
}"""


def data_off_axes(page, ids=None, tries: int = 3) -> tuple[dict, dict]:
    """Problems ({figure id: [...]}) and what was checked ({kind: count}), once the figures have settled.

    A figure that plotly is still drawing again (the renderer redraws one that plotly left off its axes) is
    looked at again after half a second, up to ``tries`` times; something drawn off its axes stays off.
    """
    for attempt in range(tries):
        reports = page.evaluate(ALIGNMENT_JS, ids)
        bad = {r["id"]: r["problems"] for r in reports if r["problems"]}
        if not bad or attempt == tries - 1:
            break
        page.wait_for_timeout(500)
    checked = {}
    for r in reports:
        for kind, n in r["checked"].items():
            checked[kind] = checked.get(kind, 0) + n
    return bad, checked


def first(bad: dict, n: int = 4) -> dict:
    """The first ``n`` problems of each figure, and how many there are: enough to see what moved."""
    return {k: v[:n] + ([f"... {len(v)} in all"] if len(v) > n else []) for k, v in bad.items()}


def wait_for_figures(page):
    page.wait_for_function("() => Array.from(document.querySelectorAll('div.mic-plotly')).every(d => d._fullLayout "
                           "&& d.querySelector('svg.main-svg g.cartesianlayer, svg.main-svg g.pielayer'))",
                           timeout=60_000)
    page.wait_for_timeout(500)


def move_controls(page, fig_id: str):
    """Move every plotly slider of a figure to its far end and back to its start, and pick every dropdown's
    last entry; yields after each move. A move can resize the figure, so each looks up its target anew."""
    for i in range(page.locator(f"#{fig_id} .slider-container").count()):
        for end in (0.995, 0.005):
            rail = page.locator(f"#{fig_id} .slider-container").nth(i).locator(".slider-rail-rect")
            rail.scroll_into_view_if_needed()
            box = rail.bounding_box()
            page.mouse.click(box["x"] + box["width"] * end, box["y"] + box["height"] / 2)
            page.wait_for_timeout(400)
            yield f"slider {i + 1} moved to its {'end' if end > 0.5 else 'start'}"
    for i in range(page.locator(f"#{fig_id} .updatemenu-header-group").count()):
        page.locator(f"#{fig_id} .updatemenu-header-group").nth(i).click()
        page.wait_for_timeout(300)
        options = page.locator(f"#{fig_id} .updatemenu-dropdown-button")
        if options.count():
            options.nth(options.count() - 1).click()
            page.wait_for_timeout(400)
            yield f"dropdown {i + 1} set to its last entry"


@needs_site
@pytest.mark.parametrize("path", PAGES)
def test_figures_draw_data_where_their_axes_put_it(server, browser, path):
    """Every marker, line, bar, heatmap and error bar within 2 px of where its axes map its values,
    as the page opens and after every slider and dropdown moves."""
    seen = visit(server, browser, path)
    assert not seen["off_axes"], f"{path}: data drawn away from its axes: {first(seen['off_axes'])}"
    assert sum(seen["checked"].values()) > 0, f"{path}: no data point of any figure was found to check"
    assert not seen["moved_off_axes"], f"{path}: data drawn away from its axes: {seen['moved_off_axes'][:2]}"


def sample_figures():
    """Figures of every kind the chapter draws, each with a wrapped title and a legend or a slider:
    what made plotly.js leave the data behind when the axes moved (issue 25)."""
    import numpy as np
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from helpers.infra import plotting
    long = "a title long enough to be wrapped onto a second line by the chapter's renderer"
    lines = plotting.figure("Lines, markers, steps: " + long, x="k", y="v(k)")
    lines.add_scatter(x=list(range(1, 10)), y=[1 + 0.1 * k for k in range(9)], mode="lines+markers", name="a")
    lines.add_scatter(x=list(range(1, 10)), y=[1] * 9, mode="lines", line_dash="dot", name="b")
    lines.add_scatter(x=list(range(1, 10)), y=[1 + 0.2 * (k // 3) for k in range(9)], line_shape="hv", name="c")
    bars = plotting.figure("Bars and error bars: " + long, x="scheme", y="value")
    bars.add_bar(x=["p", "q", "r"], y=[3, 5, 4], name="a", error_y=dict(type="data", array=[0.5, 0.3, 0.2]))
    bars.add_bar(x=["p", "q", "r"], y=[2, 6, 1], name="b")
    bars.add_scatter(x=["p", "q", "r"], y=[2.5, 5.5, 3], mode="markers", name="c",
                     error_y=dict(type="data", symmetric=False, array=[0.4] * 3, arrayminus=[0.1, 0.2, 0.3]))
    bars.update_layout(barmode="group")
    stacked = plotting.figure("Stacked bars on a log axis: " + long, x="GiB")
    stacked.add_bar(orientation="h", y=["u", "w"], x=[1, 10], name="a")
    stacked.add_bar(orientation="h", y=["u", "w"], x=[5, 20], name="b")
    stacked.update_layout(barmode="stack", xaxis_type="log")
    heat = plotting.figure("A heatmap and a contour: " + long, x="alpha", y="gamma")
    z = np.outer(np.arange(1, 8), np.linspace(0.1, 0.9, 9))
    heat.add_heatmap(x=np.linspace(0.1, 0.9, 9), y=np.arange(1, 8), z=z, colorbar=dict(title="z"))
    heat.add_contour(x=np.linspace(0.1, 0.9, 9), y=np.arange(1, 8), z=z, showscale=False,
                     contours=dict(start=2, end=2, size=1, coloring="none"))
    panels = make_subplots(rows=1, cols=2, subplot_titles=("one", "two"))
    panels.add_scatter(x=[1, 2, 3], y=[1, 10, 100], row=1, col=1, name="a")
    panels.add_scatter(x=[1, 2, 3], y=[3, 2, 1], row=1, col=2, name="b")
    panels.update_yaxes(type="log", row=1, col=1)
    panels.update_layout(title_text="Two panels: " + long, legend=dict(orientation="h", y=-0.25))
    slid = plotting.slider_figure([1, 2, 3], lambda v: [go.Scatter(x=[0, 1, 2], y=[0, v, 2 * v], name="a"),
                                                        go.Bar(x=[0, 1, 2], y=[v, 1, v], name="b")],
                                  "v", title=lambda v: " ".join([long] * (4 - v)), x="x", y="y")
    return [lines, bars, stacked, heat, panels, slid]


@pytest.fixture(scope="module")
def sample_page(browser, tmp_path_factory):
    """The sample figures on one page, as the chapter's renderer writes them, with plotly.js beside it."""
    import plotly.io as pio

    from helpers.infra import plotting
    folder = tmp_path_factory.mktemp("figures")
    shutil.copyfile(plotting.plotly_js_path(), folder / plotting.PLOTLY_JS_NAME)
    divs = "".join(pio.renderers["mic"].to_mimebundle(f.to_dict())["text/html"] for f in sample_figures())
    (folder / "index.html").write_text(f'<!DOCTYPE html><html data-content_root="./"><head><meta charset="utf-8">'
                                       f'</head><body><div style="width:800px">{divs}</div></body></html>',
                                       encoding="utf-8")
    with serve(folder) as url:
        page, problems = open_page(browser, f"{url}/index.html")
        wait_for_figures(page)
        yield page, problems
        page.close()


def test_the_renderer_draws_data_where_its_axes_put_it(sample_page):
    page, problems = sample_page
    bad, checked = data_off_axes(page)
    assert not bad, f"data drawn away from its axes: {first(bad)}"
    for kind in ("marker", "line", "bar", "error bar", "heatmap", "frame", "grid line"):
        assert checked.get(kind, 0) > 0, f"no {kind} was checked: {checked}"
    for fig_id in page.evaluate("() => Array.from(document.querySelectorAll('div.mic-plotly .slider-container'))"
                                ".map(s => s.closest('div.mic-plotly').id)"):
        for move in move_controls(page, fig_id):
            bad, _ = data_off_axes(page, [fig_id])
            assert not bad, f"{move}: data drawn away from its axes: {first(bad)}"
    assert not problems, problems


def test_the_alignment_check_sees_data_off_its_axes(sample_page):
    """Move each trace layer 5 px down: every kind of element must be reported off its axes."""
    page, _ = sample_page
    page.evaluate("""() => document.querySelectorAll('div.mic-plotly').forEach(gd => {
        for (const p of Object.values(gd._fullLayout._plots)) {
          const t = p.plot.node().transform.baseVal.consolidate().matrix;
          p.plot.attr('transform', 'translate(' + t.e + ',' + (t.f + 5) + ')');
        } })""")
    try:
        bad, _ = data_off_axes(page, tries=1)
        text = " ".join(" ".join(v) for v in bad.values())
        assert len(bad) == page.locator("div.mic-plotly").count(), bad
        for kind in ("marker at", "line passes", "bar at", "error bar at", "image, ", "drawing frame"):
            assert kind in text, f"moving the data 5 px did not show on a {kind}: {bad}"
    finally:
        page.evaluate("() => document.querySelectorAll('div.mic-plotly').forEach(gd => Plotly.redraw(gd))")
        page.wait_for_timeout(500)
