"""The live half of the chapter's control pattern, and prose rendered from measured values (infrastructure).

Every interactive idea in the chapter comes in two forms:

1. a plotly figure with sliders or dropdowns over precomputed values
   (:func:`helpers.infra.plotting.slider_figure`): it works on the static book site,
   which has no kernel;
2. :func:`live`: ipywidgets controls that recompute anything, in JupyterLab.
   On the static site (``MIC_STATIC=1``, set by the book build) it shows
   nothing, so the page never carries a dead widget.

A control never leaves a dead output: a ``ValueError`` from the function is
shown as one line in the output area, and the controls stay usable.

To show something that keeps changing while the function runs (a reply streaming
token by token), use :func:`stream_box` and set its ``value``. JupyterLab's output
widget, which :func:`live` draws into, drops ``update_display_data`` messages, so
``display(..., display_id=True).update(...)`` never shows there; a widget's value
updates render in JupyterLab and in Voila alike.

How :func:`live` fills its output widget (issue 25): the kernel itself puts what the function shows,
prints or raises into the widget's ``outputs`` (:class:`_ShownIn`), the way ``Output.append_display_data``
does. It does not use the widget as a context manager (``with out:``, what ``ipywidgets.interactive``
does), which asks the *front end* to capture the cell's messages. nbclient (``jupyter nbconvert
--execute``, papermill, myst-nb, Voila) plays that front end by sending each captured output back
to the kernel on the shell channel while it is waiting there for the cell's reply, and jupyter_client
sends through a blocking shadow of the asyncio socket, which swallows the wake-up of a reply that has just
arrived: the run then stalls, kernel idle, until the cell timeout. Without capture, nbclient has nothing
to send.
"""
from __future__ import annotations

import html
import io
import os
import re
import sys
import traceback
from typing import Callable

import ipywidgets as widgets
from IPython import get_ipython
from IPython.display import HTML, display
from ipywidgets.widgets.interaction import show_inline_matplotlib_plots

from .messages import direction, edition, message
from .outputs import say_bundle

STATIC_ENV = "MIC_STATIC"


def is_static() -> bool:
    """True while the notebook is being executed to build the static book site."""
    return os.environ.get(STATIC_ENV, "") not in ("", "0", "false", "False")


def say(template: str, **fields):
    """Display a sentence built from measured values, as Markdown: ``say("{n:,} tokens", n=n)``.

    ``template`` is a template with named fields, never an f-string (:mod:`helpers.infra.messages`). In a
    right-to-left edition (Urdu) the sentence is prose that runs right to left, in its own ``dir="rtl"`` block
    (JupyterLab has no right-to-left mode; its sanitizer keeps ``dir`` and ``lang``), and each field that is not
    Urdu runs left to right inside it (:class:`~helpers.infra.messages.LeftToRight`).
    """
    display(say_bundle(message(template, **fields)), raw=True)


def error_line(text: str) -> str:
    """A ``ValueError``'s sentence under a live control, on one line; right to left in a right-to-left edition."""
    rtl = f' dir="rtl" lang="{edition()}"' if direction() == "rtl" else ""
    return f'<div{rtl} style="color:#b00020;font-weight:600">&#9888; {html.escape(text)}</div>'


def live(fn: Callable, **controls):
    """Recompute ``fn(**values)`` whenever a control moves (JupyterLab only).

    ``controls`` are :class:`Control` descriptions (``int_slider``, ``float_slider``, ``dropdown``,
    ``text``), ipywidgets, or abbreviations such as ``(1, 8, 1)``. Describe them with the helpers
    here rather than building ipywidgets yourself, so the static site carries no widget state. The
    function may return a plotly figure, anything displayable, or ``None`` (if it
    displays by itself). ``ValueError`` messages are shown as one line.
    Returns the widget (which, as a cell's last value, is not shown a second time), or ``None`` on
    the static site.
    """
    if is_static():
        return None

    on_screen = [False]

    def shown(**values):
        if not on_screen[0]:      # the first run waits until the controls are shown, so that what it
            return                # streams (stream_box) appears as it happens
        try:
            result = fn(**values)
        except ValueError as e:
            display(HTML(error_line(str(e))))
            return
        if result is not None:
            if hasattr(result, "show"):
                result.show()
            else:
                display(result)

    built = {k: v.build() if isinstance(v, Control) else v for k, v in controls.items()}
    ui = _interactive_class()(shown, **built)
    display(ui)
    on_screen[0] = True
    ui.update()
    return Shown(ui)


_INTERACTIVE = []     # scripts/stress-nbconvert.py --without-fix puts ipywidgets.interactive here


def _interactive_class():
    """``ipywidgets.interactive`` whose runs show their output through :class:`_ShownIn` (built once)."""
    if not _INTERACTIVE:

        class Interactive(widgets.interactive):
            def update(self, *args):
                """Run the function with the controls' values; what it shows replaces the previous run's
                output once the new output arrives (``clear_output(wait=True)``, as ``interactive`` does)."""
                self.kwargs = {w._kwarg: w.get_interact_value() for w in self.kwargs_widgets}
                with _ShownIn(self.out) as shown:
                    try:
                        self.result = self.f(**self.kwargs)
                        show_inline_matplotlib_plots()
                        if self.auto_display and self.result is not None:
                            display(self.result)
                    except Exception:
                        shown.traceback()

        _INTERACTIVE.append(Interactive)
    return _INTERACTIVE[0]


_CARRIAGE_RETURN = re.compile(r".*\r(?=[^\n])")     # text a later \r on the same line overwrites
_BACKSPACE = re.compile(r"[^\n]\x08")


class _ShownIn:
    """While open, what is displayed (in this thread), printed or raised goes into an Output widget's
    ``outputs`` (each addition is sent to the browser at once), never onto the kernel's output channel.

    The first new output replaces the previous run's outputs, so the old figure stays up until the new one
    is ready. ``update_display_data`` is dropped, as JupyterLab's output widget does.
    """

    def __init__(self, out):
        self.out = out
        self.clear_next = True
        self.streams = []

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        shell = get_ipython()
        self.shell = shell
        self.pub = getattr(shell, "display_pub", None)
        if not hasattr(self.pub, "register_hook"):
            self.pub = None
        if self.pub is not None:
            self.pub.register_hook(self._display_hook)
        self.saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _Stream(self, "stdout"), _Stream(self, "stderr")
        return self

    def __exit__(self, *exc):
        sys.stdout, sys.stderr = self.saved
        if self.pub is not None:
            self.pub.unregister_hook(self._display_hook)
        return False

    def add(self, output: dict) -> None:
        outputs = [] if self.clear_next else list(self.out.outputs)
        self.clear_next = False
        last = outputs[-1] if outputs else None
        if (output["output_type"] == "stream" and last is not None and last["output_type"] == "stream"
                and last["name"] == output["name"]):
            output = dict(last, text=last["text"] + output["text"])
            outputs.pop()
        if output["output_type"] == "stream":
            text = output["text"]
            while True:
                shorter = _BACKSPACE.sub("", text)
                if shorter == text:
                    break
                text = shorter
            output["text"] = _CARRIAGE_RETURN.sub("", text)
        outputs.append(output)
        self.out.outputs = tuple(outputs)

    def _display_hook(self, msg):
        kind, content = msg["msg_type"], msg["content"]
        if kind == "display_data":
            self.add({"output_type": "display_data", "data": content["data"],
                      "metadata": content.get("metadata", {})})
        elif kind == "clear_output":
            if content.get("wait"):
                self.clear_next = True
            else:
                self.out.outputs = ()
        elif kind != "update_display_data":
            return msg
        return None

    def traceback(self) -> None:
        """Show the exception being handled, as a notebook shows an error."""
        etype, value, tb = sys.exc_info()
        if self.shell is None:
            lines = traceback.format_exception(etype, value, tb)
        else:
            lines = self.shell.InteractiveTB.structured_traceback(etype, value, tb)
        self.add({"output_type": "error", "ename": etype.__name__, "evalue": str(value), "traceback": lines})


class _Stream(io.TextIOBase):
    """``sys.stdout`` / ``sys.stderr`` inside :class:`_ShownIn`: each write goes into the widget."""

    def __init__(self, shown: _ShownIn, name: str):
        self.shown, self.name = shown, name

    def write(self, text: str) -> int:
        if text:
            self.shown.add({"output_type": "stream", "name": self.name, "text": text})
        return len(text)

    def writable(self) -> bool:
        return True

    @property
    def encoding(self):
        return "utf-8"


class Shown:
    """What :func:`live` returns: its widget, already on screen. As a cell's last value it displays
    nothing, so the controls appear once, not twice; attributes are the widget's (``.children``)."""

    def __init__(self, widget):
        self.widget = widget

    def __getattr__(self, name):
        return getattr(self.widget, name)

    def _ipython_display_(self):
        pass


STREAM_CLASS = "mic-stream"   # the browser tests find streaming outputs by this class


class _Quiet:
    """Stands in for a stream box where nothing may be shown (the static site)."""
    value = ""


def stream_box(value: str = ""):
    """An HTML area to update while the kernel works: ``box = stream_box("..."); box.value = "<b>..</b>"``.

    Each assignment is sent to the browser at once (a widget message), so a reply can appear token by
    token, inside a :func:`live` control too. On the static site it shows nothing.
    """
    if is_static():
        return _Quiet()
    box = widgets.HTML(value=value)
    box.add_class(STREAM_CLASS)
    display(box)
    return box


def _labels(options) -> list[str]:
    if isinstance(options, dict):
        return [str(k) for k in options]
    return [str(o[0]) if isinstance(o, (tuple, list)) and len(o) == 2 else str(o) for o in options]


def fitting_width(options, description: str = "") -> str:
    """A CSS width that shows the longest option label in full beside the description."""
    longest = max((len(label) for label in _labels(options)), default=0)
    return f"calc({longest + len(description)}ch + 4em)"


class Control:
    """A widget described now and built only when a live control is shown.

    Building an ipywidget registers it with the kernel, and the book build would embed its state
    (and CDN scripts to render it) into the static page; describing it lazily keeps the page clean.
    """

    def __init__(self, kind: str, **kwargs):
        self.kind, self.kwargs = kind, kwargs

    def build(self):
        kwargs = dict(self.kwargs)
        if kwargs.get("description"):                 # a label is a template too: an edition shows its own
            kwargs["description"] = message(kwargs["description"])
        if self.kind in ("Dropdown", "Select") and "layout" not in kwargs:   # long labels are never cut
            kwargs["layout"] = {"width": fitting_width(kwargs.get("options", ()), kwargs.get("description", "")),
                                "max_width": "100%"}
        return getattr(widgets, self.kind)(**kwargs)


def widget(kind: str, **kwargs) -> Control:
    """Any ipywidget by class name, described lazily: ``widget("Checkbox", value=True, description="x")``."""
    kwargs.setdefault("style", {"description_width": "initial"})
    return Control(kind, **kwargs)


def int_slider(value: int, min: int, max: int, step: int = 1, description: str = "", **kw) -> Control:
    """An integer slider that updates when released (clamped to [min, max] by construction)."""
    return Control("IntSlider", value=value, min=min, max=max, step=step, description=description,
                   continuous_update=False, style={"description_width": "initial"}, **kw)


def float_slider(value: float, min: float, max: float, step: float, description: str = "", **kw) -> Control:
    return Control("FloatSlider", value=value, min=min, max=max, step=step, description=description,
                   continuous_update=False, style={"description_width": "initial"}, **kw)


def dropdown(options, value=None, description: str = "", **kw) -> Control:
    """A dropdown; ``options`` is a list of values or of (label, value) pairs."""
    extra = {} if value is None else {"value": value}
    return Control("Dropdown", options=options, description=description,
                   style={"description_width": "initial"}, **extra, **kw)


def text(value: str = "", description: str = "", **kw) -> Control:
    """A one-line text box that updates on Enter or when it loses focus."""
    return Control("Text", value=value, description=description, continuous_update=False,
                   style={"description_width": "initial"}, **kw)
