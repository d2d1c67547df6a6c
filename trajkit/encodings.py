"""Text behind an encoding: escapes (JSON ``\\u0068``, ``\\x68``, URL ``%68``, HTML ``&#104;``), base64 and hex runs, decoded.

A secret a tool echoes in another form is still a secret: the redactor (``trajkit.redact``) and the
push scan look at what these decode to as well as at the text. ``unescaped`` keeps, for each decoded
character, where it came from, so a secret found in the decoded text is replaced in the original.
``ENCODED`` finds the strings worth decoding; it reads alike in Python's ``re`` and Arrow's RE2, so a
column's strings are picked with a vectorized kernel and only those are decoded in Python.

A run that decodes to binary (an image a tool returned, a ``data:`` URL) is searched where binary holds
text (``payload_texts``): a PNG's text chunks (tEXt, zTXt and iTXt, inflated up to ``MAX_INFLATED``), a
gzip member's text, and every stretch of printable ASCII in the clear (what ``strings`` shows: JPEG
comments and EXIF, audio tags, PDF strings, bytes after a PNG's end). A compressed text that cannot be
read (it does not inflate, or inflates past the cap) reads as ``UNREADABLE``, which the redactor and
the scan treat as a secret: what cannot be read cannot be vouched for.
"""

from __future__ import annotations

import base64
import binascii
import re
import zlib
from collections.abc import Iterator

from trajkit.pngchunks import SIGNATURE, TEXT_CHUNKS, UnreadablePng, chunk_texts, chunks, inflate

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
_TEXT_BYTES = bytes(b for b in range(256) if chr(b).isprintable() or chr(b).isspace())  # as Latin-1
_IN_THE_CLEAR = re.compile(rb"[\t\x20-\x7e]{6,}")  # printable ASCII in binary, as long as a short secret
MAX_INFLATED = 8 * 2**20  # compressed text inside a payload (a tool's image is at most 1 MB): more is a bomb
UNREADABLE = "\0a compressed text inside a binary payload that cannot be read\0"


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
    """(start, end, decoded text) for every run of ``text`` that decodes, as hex digits or as base64 (standard
    or URL-safe), to mostly printable text (bytes read as Latin-1, one character each), trying base64 from
    each of its first four characters (a run in binary data may start with a byte that is not part of it);
    for a run that decodes to binary, one for each text the binary holds (``payload_texts``)."""
    for m in _RUN_RX.finditer(text):
        whole = m[0].rstrip("=")
        digits = whole[2:] if whole[:2] in ("0x", "0X") else whole
        if _HEX(digits):
            raws = [bytes.fromhex(digits)]
        elif _MIXED(whole):
            altchars = b"-_" if "-" in whole or "_" in whole else None
            tries = (raw for skip in range(4) if (raw := _base64(whole[skip:], altchars)) is not None)
            raws = [raw for raw in [next(tries, None)] if raw is not None]
            if raws and not _printable(raws[0]):  # binary from the run's start, or text from a later character
                raws += [raw for raw in [next(filter(_printable, tries), None)] if raw is not None]
        else:
            continue
        for decoded in (text for raw in raws for text in payload_texts(raw)):
            yield m.start(), m.end(), decoded


def _base64(run: str, altchars: bytes | None) -> bytes | None:
    run = run[:-1] if len(run) % 4 == 1 else run  # a lone last character carries no whole byte
    try:
        return base64.b64decode(run + "=" * (-len(run) % 4), altchars=altchars)
    except (binascii.Error, ValueError):
        return None


def _printable(raw: bytes) -> bool:
    """Whether ``raw``, read as Latin-1, is at least 90% printable characters and spaces."""
    return len(raw.translate(None, _TEXT_BYTES)) <= 0.1 * len(raw)


def payload_texts(raw: bytes) -> list[str]:
    """The texts decoded bytes hold: themselves, as Latin-1, when mostly printable; else a PNG's text chunks,
    a gzip member inflated, and the stretches of printable ASCII in the clear (joined by line breaks);
    ``UNREADABLE`` for a compressed text that does not inflate within ``MAX_INFLATED``."""
    if _printable(raw):
        return [raw.decode("latin-1")]
    out = []
    try:
        if raw.startswith(SIGNATURE):
            out += [
                t
                for kind, body in chunks(raw, strict=False)
                if kind in TEXT_CHUNKS
                for t in chunk_texts(kind, body, MAX_INFLATED)
            ]
        elif raw.startswith(b"\x1f\x8b\x08"):  # a gzip member, deflated
            out.append(inflate(raw, "gzip", MAX_INFLATED, wbits=16 + zlib.MAX_WBITS).decode("latin-1"))
    except UnreadablePng:
        out.append(UNREADABLE)
    clear = b"\n".join(_IN_THE_CLEAR.findall(raw))
    return out + ([clear.decode("ascii")] if clear else [])


def decoded_views(text: str, depth: int = 2) -> Iterator[str]:
    """Every decoded form of ``text``: its escapes decoded, each base64 run decoded, and those decoded
    again (``depth`` levels: base64 of a URL-encoded token, say)."""
    if depth <= 0:
        return
    plain = unescaped(text)
    for view in ([plain[0]] if plain else []) + [d for _, _, d in base64_runs(text)]:
        yield view
        yield from decoded_views(view, depth - 1)
