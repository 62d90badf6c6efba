"""The language switch links each page to the same page in the other edition."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "book" / "_ext"))
from mic_editions import site_root, switch_html  # noqa: E402


def test_an_english_page_links_its_hindi_twin():
    out = switch_html("notebooks/03-cache-size", "en", "../")
    assert 'href="../hi/notebooks/03-cache-size.html" lang="hi"' in out
    assert '<span class="mic-edition-current" lang="en">English</span>' in out


def test_a_hindi_page_links_its_english_twin():
    out = switch_html("notebooks/03-cache-size", "hi", "../")
    assert 'href="../../notebooks/03-cache-size.html" lang="en"' in out
    assert 'lang="hi">हिंदी</span>' in out


def test_the_root_comes_from_sphinx_pathto():
    assert site_root(lambda name: "../index.html") == "../"
    assert site_root(lambda name: "index.html") == ""


def test_the_hindi_search_keeps_a_word_whole():
    from mic_editions import SearchHindi
    search = SearchHindi({})
    assert search.split("cache का हिसाब, यह हिंदी। tokens") == ["cache", "का", "हिसाब", "यह", "हिंदी", "tokens"]
    assert [search.stem(w) for w in ("हिसाब", "tokens")] == ["हिसाब", "token"]     # Hindi passes unchanged


def test_an_urdu_page_links_its_twins_each_in_its_script():
    out = switch_html("notebooks/03-cache-size", "ur", "../")
    assert 'href="../../notebooks/03-cache-size.html" lang="en"' in out
    assert 'href="../../hi/notebooks/03-cache-size.html" lang="hi"' in out
    assert 'lang="ur">اردو</span>' in out


def test_the_urdu_search_keeps_a_word_whole_and_ends_it_at_urdu_punctuation():
    from mic_editions import SearchUrdu
    search = SearchUrdu({})
    # U+0670 (the superscript alef of "اعلیٰ") and U+064E (a zabar) are combining marks: the default splitter cuts there
    assert search.split("cache کا حساب، اعلیٰ مَیں۔ tokens") == ["cache", "کا", "حساب", "اعلیٰ", "مَیں", "tokens"]
    assert [search.stem(w) for w in ("حساب", "tokens")] == ["حساب", "token"]


def test_the_switch_is_named_in_the_page_language_only():
    """Its aria-label holds no other language's words: a label cannot mark a part of itself with another lang."""
    assert 'aria-label="Language"' in switch_html("intro", "en", "")
    assert 'aria-label="زبان"' in switch_html("intro", "ur", "")
