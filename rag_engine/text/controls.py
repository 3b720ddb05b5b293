"""Control characters never reach a terminal, a prompt or the store from a document.

A document can carry terminal control sequences (``\\x1b]0;title\\x07`` retitles the window,
``\\x1b[2J`` clears it) and, through a JSON escape, a NUL. ``strip_controls`` removes escape
sequences whole, then every C0 and C1 control character except tab and newline; a carriage
return becomes a newline (a lone one would overwrite the printed line).
"""

from __future__ import annotations

import re

_ESCAPES = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC ... BEL or ST (window title, hyperlinks)
    r"|\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: cursor moves, clear screen, colours
    r"|\x1b[@-Z\\-_]"  # other two-character escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"  # the one-byte CSI
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def strip_controls(text: str) -> str:
    if text.isprintable():  # the common case: nothing to do
        return text
    text = _ESCAPES.sub("", text).replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROLS.sub("", text)
