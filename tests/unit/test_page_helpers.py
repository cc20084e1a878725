"""The shared presentation helpers: the HTML page shell and table (components.pages) and the
Markdown table (components.markdown)."""

import pytest

from components import markdown, pages


def test_markdown_tables_escape_cells_and_refuse_rows_that_do_not_fit():
    assert markdown.table(["a", "b"], [["x|y", 1]], "lr") == ["| a | b |", "|---|---:|", "| x\\|y | 1 |"]
    assert markdown.table(["a|b"], [["two\nlines"]], "l") == ["| a\\|b |", "|---|", "| two lines |"]
    with pytest.raises(ValueError, match="2 columns"):
        markdown.table(["a", "b"], [["x"]], "lr")
    with pytest.raises(ValueError, match="one of l/r per column"):
        markdown.table(["a", "b"], [], "lc")


def test_the_page_shell_escapes_text_and_keeps_markup():
    page = pages.page("a <b> & c", [pages.Markup("<p>kept</p>"), "<script>x</script>"], pages.GRID_CSS)
    assert page.startswith("<!DOCTYPE html>\n") and page.endswith("</body></html>\n")
    assert "<title>a &lt;b&gt; &amp; c</title>" in page and "<h1>a &lt;b&gt; &amp; c</h1>" in page
    assert "<p>kept</p>" in page and "<script" not in page and "&lt;script&gt;x&lt;/script&gt;" in page
    assert f"<style>{pages.GRID_CSS}</style>" in page


def test_the_page_shell_can_leave_the_heading_to_a_block():
    page = pages.page("T", [pages.fragment("<header><h1>{{ t }}</h1></header>", t="<T>")], "p{margin:0}",
                      heading=False, lang="en", viewport=True)  # fmt: skip
    assert '<html lang="en">' in page and 'name="viewport"' in page
    assert page.count("<h1>") == 1 and "<header><h1>&lt;T&gt;</h1></header>" in page


def test_a_style_sheet_that_would_close_the_style_element_is_refused():
    with pytest.raises(ValueError, match="must not contain '</'"):
        pages.page("T", [], "p{}</style><script>")


def test_html_tables_escape_cells_and_mark_rows_and_left_columns():
    table = pages.table(["name", "n"], [["<x>", 1], ["y", 2]], left=1, classes=["best", ""])
    assert table == (
        "<table><tr><th class=l>name</th><th>n</th></tr>"
        '<tr class="best"><td class=l>&lt;x&gt;</td><td>1</td></tr><tr><td class=l>y</td><td>2</td></tr></table>'
    )
    with pytest.raises(ValueError, match="1 row classes for 2 rows"):
        pages.table(["a"], [["x"], ["y"]], classes=["best"])
