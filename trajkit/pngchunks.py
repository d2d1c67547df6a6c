"""A PNG's chunks, and the text its text chunks hold: tEXt, zTXt (inflated, with a cap), iTXt.

One reader for the two places that look inside a PNG: the push scan (``data_cards/png.py``, strict:
every chunk whole, its CRC matching, nothing after IEND) and the redactor (``encodings``: a PNG inside
a base64 payload, read leniently, since a hostile image's bad CRC or missing IEND hides none of the
text in it).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

SIGNATURE = b"\x89PNG\r\n\x1a\n"
TEXT_CHUNKS = (b"tEXt", b"zTXt", b"iTXt")
MAX_INFLATED = 64 * 2**20  # a plot inflates to a few MiB; more is a bomb, not a plot


class UnreadablePng(ValueError):
    """A PNG, or a chunk of one, that cannot be read."""


def chunks(data: bytes, strict: bool = True) -> Iterator[tuple[bytes, bytes]]:
    """(type, body) of each chunk before IEND. ``strict``: a truncated chunk, a CRC that fails, a missing
    IEND or bytes after it raise ``UnreadablePng``; otherwise what can be read is read and the rest left."""
    if not data.startswith(SIGNATURE):
        raise UnreadablePng("not a PNG (bad signature)")
    pos = len(SIGNATURE)
    while True:
        if pos + 8 > len(data):
            if strict:
                raise UnreadablePng("truncated before IEND")
            return
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        crc = data[pos + 8 + length : pos + 12 + length]
        if strict and not (len(body) == length and len(crc) == 4 and crc == struct.pack(">I", zlib.crc32(kind + body))):
            raise UnreadablePng(f"chunk {kind!r} is truncated or fails its CRC")
        pos += 12 + length
        if kind == b"IEND":
            break
        yield kind, body
    if strict and pos != len(data):
        raise UnreadablePng(f"{len(data) - pos} bytes after IEND")


def chunk_texts(kind: bytes, body: bytes, cap: int = MAX_INFLATED) -> list[str]:
    """A text chunk's keyword and text (an iTXt's language and translated keyword too), decoded, a compressed
    one inflated up to ``cap`` bytes; ``UnreadablePng`` when it cannot be."""
    try:
        key, rest = body.split(b"\0", 1)
        if kind == b"tEXt":
            return [key.decode("latin-1"), rest.decode("latin-1")]
        if kind == b"zTXt":
            if rest[:1] != b"\0":
                raise UnreadablePng("zTXt chunk with an unknown compression method")
            return [key.decode("latin-1"), inflate(rest[1:], "zTXt", cap).decode("latin-1")]
        if kind == b"iTXt":
            compressed, method, rest = rest[0], rest[1], rest[2:]
            language, translated, text = rest.split(b"\0", 2)
            if compressed and method != 0:
                raise UnreadablePng("iTXt chunk with an unknown compression method")
            value = inflate(text, "iTXt", cap) if compressed else text
            return [key.decode("latin-1"), language.decode("ascii"), translated.decode("utf-8"), value.decode("utf-8")]
    except (ValueError, IndexError) as e:
        if isinstance(e, UnreadablePng):
            raise
        raise UnreadablePng(f"{kind.decode('latin-1')} chunk cannot be decoded ({e})") from None
    raise UnreadablePng(f"{kind.decode('latin-1')!r} is not a text chunk")


def inflate(data: bytes, what: str, cap: int = MAX_INFLATED, wbits: int = zlib.MAX_WBITS) -> bytes:
    """A zlib stream (``wbits=31``: a gzip member) inflated; ``UnreadablePng`` when it does not inflate or
    inflates past ``cap`` bytes (a bomb)."""
    d = zlib.decompressobj(wbits)
    try:
        raw = d.decompress(data, cap)
    except zlib.error as e:
        raise UnreadablePng(f"{what} does not inflate ({e})") from None
    if d.unconsumed_tail:
        raise UnreadablePng(f"{what} inflates past {cap // 2**20} MiB")
    return raw
