"""The text inside a PNG, for the push scan: its text chunks (tEXt, zTXt, iTXt) decoded, its compressed
chunks (iCCP, IDAT) inflated.

A PNG the card's plots wrote has a handful of chunk types; ``push`` uploads a PNG only when every chunk
is one it can read here (known type, matching CRC, text that decodes, inflation within a bound: the
strict reading of ``trajkit.pngchunks``). Anything else raises ``UnreadablePng`` with the reason, and the
push is refused.
"""

from __future__ import annotations

from trajkit.pngchunks import TEXT_CHUNKS, UnreadablePng, chunk_texts, chunks, inflate

PLAIN = {b"IHDR", b"PLTE", b"IEND", b"tRNS", b"pHYs", b"gAMA", b"cHRM", b"sRGB", b"sBIT", b"bKGD", b"tIME", b"hIST"}
__all__ = ["UnreadablePng", "texts"]


def texts(data: bytes) -> list[tuple[str, bool]]:
    """Every text a PNG carries, and whether it is binary: text chunks decoded (False), other chunks and
    inflated compressed ones as Latin-1 (True)."""
    out: list[tuple[str, bool]] = []
    idat = []
    for kind, body in chunks(data):
        if kind == b"IDAT":
            idat.append(body)
        elif kind in PLAIN:
            out.append((body.decode("latin-1"), True))
        elif kind in TEXT_CHUNKS:
            out += [(t, False) for t in chunk_texts(kind, body)]
        elif kind == b"iCCP":  # a profile name, then a zlib stream, as in a zTXt chunk
            name, _, rest = body.partition(b"\0")
            if rest[:1] != b"\0":
                raise UnreadablePng("iCCP chunk with an unknown compression method")
            out += [(name.decode("latin-1"), False), (inflate(rest[1:], "iCCP").decode("latin-1"), True)]
        else:
            raise UnreadablePng(f"chunk type {kind.decode('latin-1')!r} is not one the scan reads")
    return out + [(inflate(b"".join(idat), "IDAT").decode("latin-1"), True)]
