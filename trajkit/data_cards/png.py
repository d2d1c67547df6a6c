"""The text inside a PNG, for the push scan: its text chunks (tEXt, zTXt, iTXt) decoded, its compressed
chunks (iCCP, IDAT) inflated.

A PNG the card's plots wrote has a handful of chunk types; ``push`` uploads a PNG only when every chunk
is one it can read here (known type, matching CRC, text that decodes, inflation within a bound).
Anything else raises ``UnreadablePng`` with the reason, and the push is refused.
"""

from __future__ import annotations

import struct
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"
PLAIN = {b"IHDR", b"PLTE", b"IEND", b"tRNS", b"pHYs", b"gAMA", b"cHRM", b"sRGB", b"sBIT", b"bKGD", b"tIME", b"hIST"}
MAX_INFLATED = 64 * 2**20  # a plot inflates to a few MiB; more is a bomb, not a plot


class UnreadablePng(ValueError):
    """A PNG the push scan cannot vouch for."""


def texts(data: bytes) -> list[tuple[str, bool]]:
    """Every text a PNG carries, and whether it is binary: text chunks decoded (False), other chunks and
    inflated compressed ones as Latin-1 (True)."""
    if not data.startswith(SIGNATURE):
        raise UnreadablePng("not a PNG (bad signature)")
    out: list[tuple[str, bool]] = []
    idat = []
    pos = len(SIGNATURE)
    while True:
        if pos + 8 > len(data):
            raise UnreadablePng("truncated before IEND")
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        crc = data[pos + 8 + length : pos + 12 + length]
        if len(body) != length or len(crc) != 4 or struct.unpack(">I", crc)[0] != zlib.crc32(kind + body):
            raise UnreadablePng(f"chunk {kind!r} is truncated or fails its CRC")
        pos += 12 + length
        if kind == b"IEND":
            break
        out += _chunk_texts(kind, body, idat)
    if pos != len(data):
        raise UnreadablePng(f"{len(data) - pos} bytes after IEND")
    return out + [(_inflate(b"".join(idat), "IDAT"), True)]


def _chunk_texts(kind: bytes, body: bytes, idat: list[bytes]) -> list[tuple[str, bool]]:
    if kind == b"IDAT":
        idat.append(body)
        return []
    if kind in PLAIN:
        return [(body.decode("latin-1"), True)]
    try:
        if kind == b"tEXt":
            key, text = body.split(b"\0", 1)
            return [(key.decode("latin-1"), False), (text.decode("latin-1"), False)]
        if kind in (b"zTXt", b"iCCP"):
            key, rest = body.split(b"\0", 1)
            if rest[:1] != b"\0":
                raise UnreadablePng(f"{kind.decode()} chunk with an unknown compression method")
            return [(key.decode("latin-1"), False), (_inflate(rest[1:], kind.decode()), kind == b"iCCP")]
        if kind == b"iTXt":
            key, rest = body.split(b"\0", 1)
            compressed, method, rest = rest[0], rest[1], rest[2:]
            language, translated, text = rest.split(b"\0", 2)
            if compressed and method != 0:
                raise UnreadablePng("iTXt chunk with an unknown compression method")
            value = _inflate(text, "iTXt", latin1=False) if compressed else text.decode("utf-8")
            return [
                (t, False) for t in (key.decode("latin-1"), language.decode("ascii"), translated.decode("utf-8"), value)
            ]
    except (ValueError, IndexError) as e:
        if isinstance(e, UnreadablePng):
            raise
        raise UnreadablePng(f"{kind.decode('latin-1')} chunk cannot be decoded ({e})") from None
    raise UnreadablePng(f"chunk type {kind.decode('latin-1')!r} is not one the scan reads")


def _inflate(data: bytes, what: str, latin1: bool = True) -> str:
    d = zlib.decompressobj()
    try:
        raw = d.decompress(data, MAX_INFLATED)
    except zlib.error as e:
        raise UnreadablePng(f"{what} does not inflate ({e})") from None
    if d.unconsumed_tail:
        raise UnreadablePng(f"{what} inflates past {MAX_INFLATED // 2**20} MiB")
    return raw.decode("latin-1") if latin1 else raw.decode("utf-8")
