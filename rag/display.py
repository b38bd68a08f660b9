"""Text from questions, answers and reviewers, made safe to show on a terminal.

Stored text is kept exactly as it came; ``safe_text`` is applied where a person reads it. Control
characters become visible instead of acting on the terminal: C0 (except newline and tab) and DEL
become their Unicode "control pictures" (ESC → ␛, CR → ␍, BEL → ␇, DEL → ␡), so an escape
sequence shows as harmless text such as ``␛[2J``; C1 controls (U+0080–U+009F, which include the
one-character CSI) and the bidirectional overrides, embeddings, isolates and marks (U+202A–U+202E,
U+2066–U+2069, U+200E, U+200F, U+061C) become ``<U+202E>``-style markers, so text cannot be
reordered, hidden or made to overwrite what the reviewer sees. The review page does the same in
``review.js`` (``safeText``).
"""

from __future__ import annotations

import re

_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_UNSAFE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f{_BIDI}]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)  # the control picture: U+241B ␛ for ESC
    if code == 0x7F:
        return "\u2421"  # ␡
    return f"<U+{code:04X}>"


def safe_text(text: str) -> str:
    """``text`` with every control and bidirectional-formatting character made visible;
    newlines and tabs are kept. Printable text, including any script, is unchanged."""
    return _UNSAFE.sub(_visible, text)
