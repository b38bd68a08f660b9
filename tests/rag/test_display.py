"""``safe_text``: text that would act on a reviewer's terminal is shown, not obeyed."""

from __future__ import annotations

import pytest

from rag.display import safe_text


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b[2J\x1b[Hcleared", "\u241b[2J\u241b[Hcleared"),  # clear screen, cursor home
        ("\x1b]0;owned\x07title", "\u241b]0;owned\u2407title"),  # window title (OSC ... BEL)
        ("\x1b[8mhidden\x1b[0m", "\u241b[8mhidden\u241b[0m"),  # concealed text
        ("over\rwrite", "over\u240dwrite"),
        ("nul\x00del\x7f", "nul\u2400del\u2421"),
        ("\x9b2J", "<U+009B>2J"),  # the one-character CSI (C1)
        ("\x85next line", "<U+0085>next line"),
        ("abc\u202edcba", "abc<U+202E>dcba"),  # right-to-left override
        ("\u2066x\u2069 \u200e\u200f\u061c", "<U+2066>x<U+2069> <U+200E><U+200F><U+061C>"),
        ("\u202a\u202b\u202c\u202d", "<U+202A><U+202B><U+202C><U+202D>"),
    ],
)
def test_controls_and_bidi_formatting_become_visible(raw: str, shown: str) -> None:
    assert safe_text(raw) == shown


def test_ordinary_text_is_unchanged() -> None:
    text = "Line one\n\tindented — café, 東京, مرحبا, עברית, emoji 🙂, ZWJ 👩\u200d💻"
    assert safe_text(text) == text
    assert safe_text("") == ""


def test_nothing_is_left_that_a_terminal_would_obey() -> None:
    every = "".join(chr(c) for c in range(0x00, 0xA0)) + "\u202a\u202e\u2066\u2069\u200e\u061c"
    shown = safe_text(every)
    assert not any((ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F for c in shown)
    assert not set(shown) & set("\u202a\u202e\u2066\u2069\u200e\u061c")
