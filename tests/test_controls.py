from helpers import controls


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
