"""The built sites' accessibility audit (issue 41): axe-core run on every page of every edition in Chromium.

    python -m mic_tools.accessibility [SITE]      (default: book/_build/html, with its hi/ and ur/ folders)

prints every violation axe-core finds, grouped by rule, with its impact, how many pages and elements it hits and a
few of those elements; ``tests/test_accessibility.py`` runs the same audit and fails on any critical or serious one.
axe-core is the copy bundled by ``axe-playwright-python`` (a test dependency in ``pyproject.toml``): nothing is
downloaded when the audit runs. One browser opens every page in turn, in one tab, served from a local HTTP server.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import http.server
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "book" / "_build" / "html"
IMPACTS = ("critical", "serious", "moderate", "minor")
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def pages(site: Path = SITE) -> list[str]:
    """Every HTML page of the English site and of each edition's site in its folder, relative to ``site``; not
    ``index.html``, which only sends the browser on to ``intro.html``."""
    skip = {"_static", "_sources", "_images"}
    return sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html")
                  if not skip & set(p.relative_to(site).parts) and not is_redirect(p))


def is_redirect(page: Path) -> bool:
    """Whether a page is only a ``<meta http-equiv="Refresh">`` to another one (Jupyter Book's ``index.html``)."""
    text = page.read_text(encoding="utf8", errors="replace")
    return len(text) < 500 and 'http-equiv="Refresh"' in text


def axe_script() -> str:
    """axe-core's source, as ``axe-playwright-python`` bundles it."""
    from axe_playwright_python.base import AXE_SCRIPT
    return AXE_SCRIPT


@contextlib.contextmanager
def serve(folder: Path):
    """A quiet HTTP server for ``folder`` on a free local port; yields its URL."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()


# axe-core's rules as it runs them by default, and its experimental ones too (label-content-name-mismatch, whose
# serious findings issue 41 fixed, is one). color-contrast is by far the slowest rule: it measures each of the
# thousands of syntax-highlighted tokens in a page's code cells (10 s a page). A token's colour is its Pygments
# class's, on its code box's one background, so in code cells it measures the first token of each class on the page
# (the others are marked data-axe-same-colour, which its selector leaves out), and everything else as it is.
RUN_AXE = """async () => {
  const seen = new Set();
  document.querySelectorAll('.cell_input pre span').forEach(
    s => seen.has(s.className) ? s.setAttribute('data-axe-same-colour', '') : seen.add(s.className));
  axe.configure({rules: [{id: 'color-contrast', selector: '*:not([data-axe-same-colour])'}]});
  const experimental = Object.fromEntries(axe.getRules(['experimental']).map(r => [r.ruleId, {enabled: true}]));
  return (await axe.run(document, {resultTypes: ['violations'], rules: experimental})).violations;
}"""


# A page is audited as a reader meets it: loaded, its maths typeset and every figure drawn by plotly.js.
DRAWN = "() => [...document.querySelectorAll('.mic-plotly')].every(d => d.querySelector('.main-svg'))"


def audit_page(page, url: str, script: str) -> list[dict]:
    """axe-core's violations on one page, once it has loaded, MathJax has typeset its maths and plotly.js has drawn
    its figures."""
    page.goto(url, wait_until="load")
    page.evaluate("async () => { await window.MathJax?.startup?.promise; }")
    page.wait_for_function(DRAWN, timeout=60_000, polling=200)
    page.evaluate(script)
    return page.evaluate(RUN_AXE)


# What a screen reader may meet inside a figure besides its name: plotly's toolbar (download, zoom), named buttons.
TOOLBAR_ROLES = {"button", "toolbar", "generic", "none"}


def figures_heard(page) -> list[tuple[str, str, str, list[tuple[str, str]]]]:
    """Each figure of the page (``.mic-figure``), in page order, as Chromium's accessibility tree gives it to a
    screen reader: ``(aria-label in the DOM, role, name, [(role, name) of each node heard inside it])``. A figure
    heard as it should be is ``(label, "figure", label, [...])`` with only the toolbar's named buttons inside:
    nothing of what plotly.js drew (no tick label, legend entry or image)."""
    cdp = page.context.new_cdp_session(page)
    try:
        cdp.send("Accessibility.enable")
        nodes = cdp.send("Accessibility.getFullAXTree")["nodes"]
        root = cdp.send("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
        ids = cdp.send("DOM.querySelectorAll", {"nodeId": root, "selector": ".mic-figure"})["nodeIds"]
        figures = []
        for node_id in ids:
            described = cdp.send("DOM.describeNode", {"nodeId": node_id})["node"]
            attrs = described.get("attributes", [])
            figures.append((dict(zip(attrs[::2], attrs[1::2])).get("aria-label", ""), described["backendNodeId"]))
    finally:
        cdp.detach()
    by_dom = {n.get("backendDOMNodeId"): n for n in nodes}
    by_id = {n["nodeId"]: n for n in nodes}

    def name(node) -> str:
        return (node.get("name") or {}).get("value", "")

    def inside(node) -> list[tuple[str, str]]:
        kids = [by_id[k] for k in node.get("childIds", []) if k in by_id]
        return [pair for k in kids for pair in ([] if k.get("ignored") else [(k["role"]["value"], name(k))])
                + inside(k)]

    heard = []
    for label, backend in figures:
        node = by_dom.get(backend)
        if node is None or node.get("ignored"):
            heard.append((label, "ignored", "", []))
        else:
            heard.append((label, node["role"]["value"], name(node), inside(node)))
    return heard


def audit(browser, site: Path = SITE, figures: dict | None = None) -> dict[str, list[dict]]:
    """Every page's violations, ``{page: [violation, ...]}``, each page opened in turn in one tab of ``browser``.
    Given a dict ``figures``, it also records each page's :func:`figures_heard` there."""
    script, found = axe_script(), {}
    with serve(site) as url:
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        for path in pages(site):
            found[path] = audit_page(page, f"{url}/{path}", script)
            if figures is not None:
                figures[path] = figures_heard(page)
        page.close()
    return found


def counts(found: dict[str, list[dict]]) -> dict[str, dict[str, int]]:
    """``{impact: {rule: elements}}`` over every page."""
    table = {impact: collections.Counter() for impact in IMPACTS}
    for violations in found.values():
        for v in violations:
            table[v["impact"]][v["id"]] += len(v["nodes"])
    return table


def edition(path: str) -> str:
    """The edition a page belongs to: ``hi``, ``ur``, or ``en`` for the English site at the root."""
    first = path.split("/")[0]
    return first if len(first) == 2 else "en"


def summary(found: dict[str, list[dict]], impacts=IMPACTS, examples: int = 3) -> str:
    """A readable report: per rule, its impact, help text, pages and elements per edition, and a few elements."""
    rules = collections.defaultdict(list)
    for path, violations in found.items():
        for v in violations:
            rules[v["id"]].append((path, v))
    lines = []
    for rule, hits in sorted(rules.items(), key=lambda kv: (IMPACTS.index(kv[1][0][1]["impact"]), kv[0])):
        impact, help_ = hits[0][1]["impact"], hits[0][1]["help"]
        if impact not in impacts:
            continue
        per_edition = collections.Counter()
        for path, v in hits:
            per_edition[edition(path)] += len(v["nodes"])
        elements = sum(per_edition.values())
        lines.append(f"{impact:9} {rule}: {help_} — {elements} elements on {len({p for p, _ in hits})} pages "
                     f"({', '.join(f'{e}: {n}' for e, n in sorted(per_edition.items()))})")
        shown = [(path, node) for path, v in hits for node in v["nodes"]][:examples]
        lines += [f"            {path}: {node['html'][:160]}" for path, node in shown]
    return "\n".join(lines) or "no violations"


def main(argv: list[str]) -> int:
    from playwright.sync_api import sync_playwright
    site = Path(argv[0]) if argv else SITE
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_FLAGS)
        found = audit(browser, site)
        browser.close()
    print(f"{len(found)} pages of {site}")
    print(summary(found))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
