"""Text behind an encoding: escapes (JSON ``\\u0068``, ``\\x68``, URL ``%68``, HTML ``&#104;``), base64 and hex runs, decoded.

A secret a tool echoes in another form is still a secret: the redactor (``trajkit.redact``) and the
push scan look at what these decode to as well as at the text. ``unescaped`` keeps, for each decoded
character, where it came from, so a secret found in the decoded text is replaced in the original.
``ENCODED`` finds the strings worth decoding; it reads alike in Python's ``re`` and Arrow's RE2, so a
column's strings are picked with a vectorized kernel and only those are decoded in Python.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator

_ESCAPE = r"\\u[0-9A-Fa-f]{4}|\\x[0-9A-Fa-f]{2}|%[0-9A-Fa-f]{2}|&#[0-9]{1,7};|&#[xX][0-9A-Fa-f]{1,6};"
MIN_RUN = 12  # base64 of 9 bytes: a short configured secret (6 characters, the floor) and a little around it
BASE64_RUN = rf"[A-Za-z0-9+/_-]{{{MIN_RUN},}}={{0,2}}"  # standard or URL-safe, or hex digits (``hex_runs``)
_C = "[A-Za-z0-9+/_-]"
# what picks the strings worth decoding (RE2, vectorized): escapes, a run with a capital letter (base64 of text
# has them; the hex ids every row holds, and words, do not), a run of 24 or more lowercase hex digits
SUSPECT_RUN = rf"{_C}{{5,}}[A-Z]{_C}{{5,}}|[A-Z]{_C}{{11,}}|{_C}{{11,}}[A-Z]|[0-9a-f]{{24,}}"
ENCODED = f"{_ESCAPE}|{SUSPECT_RUN}"
_ESCAPE_RX = re.compile(_ESCAPE)
_RUN_RX = re.compile(BASE64_RUN)
_MIXED = re.compile(r"[A-Z]").search  # base64 of text has capitals; hex digests and words in lower case do not
_HEX = re.compile(r"(?:[0-9a-f]{2}){12,}|(?:[0-9A-F]{2}){12,}").fullmatch  # 12 bytes or more, as hex digits


def unescaped(text: str) -> tuple[str, list[int], list[int]] | None:
    """``text`` with its escapes decoded (None when it has none), and for each decoded character the
    start and end of what it came from in ``text``."""
    if not _ESCAPE_RX.search(text):
        return None
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    pos = 0
    for m in _ESCAPE_RX.finditer(text):
        out.extend(text[pos : m.start()])
        starts.extend(range(pos, m.start()))
        ends.extend(range(pos + 1, m.start() + 1))
        out.append(_char(m[0]))
        starts.append(m.start())
        ends.append(m.end())
        pos = m.end()
    out.extend(text[pos:])
    starts.extend(range(pos, len(text)))
    ends.extend(range(pos + 1, len(text) + 1))
    return "".join(out), starts, ends


def _char(escape: str) -> str:
    if escape[0] == "&":  # an HTML character reference: &#104; or &#x68;
        code = int(escape[3:-1], 16) if escape[2] in "xX" else int(escape[2:-1])
        return chr(code) if code < 0x110000 else "\ufffd"
    return chr(int(escape[2:] if escape[0] == "\\" else escape[1:], 16))


def base64_runs(text: str) -> Iterator[tuple[int, int, str]]:
    """(start, end, decoded text) for every run of ``text`` that decodes to mostly printable text (bytes read
    as Latin-1, one character each): as hex digits, or as base64 (standard or URL-safe) from any of its first
    four characters (a run in binary data may start with a byte that is not part of it)."""
    for m in _RUN_RX.finditer(text):
        whole = m[0].rstrip("=")
        digits = whole[2:] if whole[:2] in ("0x", "0X") else whole
        if _HEX(digits):
            decoded = _printable(bytes.fromhex(digits))
        elif _MIXED(whole):
            altchars = b"-_" if "-" in whole or "_" in whole else None
            decoded = next((d for skip in range(4) if (d := _base64(whole[skip:], altchars)) is not None), None)
        else:
            continue
        if decoded is not None:
            yield m.start(), m.end(), decoded


def _base64(run: str, altchars: bytes | None) -> str | None:
    run = run[:-1] if len(run) % 4 == 1 else run  # a lone last character carries no whole byte
    try:
        return _printable(base64.b64decode(run + "=" * (-len(run) % 4), altchars=altchars))
    except (binascii.Error, ValueError):
        return None


def _printable(raw: bytes) -> str | None:
    decoded = raw.decode("latin-1")
    return decoded if sum(c.isprintable() or c.isspace() for c in decoded) >= 0.9 * len(decoded) else None


def decoded_views(text: str, depth: int = 2) -> Iterator[str]:
    """Every decoded form of ``text``: its escapes decoded, each base64 run decoded, and those decoded
    again (``depth`` levels: base64 of a URL-encoded token, say)."""
    if depth <= 0:
        return
    plain = unescaped(text)
    for view in ([plain[0]] if plain else []) + [d for _, _, d in base64_runs(text)]:
        yield view
        yield from decoded_views(view, depth - 1)
