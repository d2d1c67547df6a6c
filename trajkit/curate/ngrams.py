"""Tokens and word n-grams as 64-bit hashes, vectorized over whole corpora.

A text is seen as its lowercased NFKC tokens, so case and spacing never hide a
duplicate: decontamination uses words (``\\w+``), as n-gram overlap checks
usually do; dedup also keeps each symbol as a token (``2+3`` and ``2*3`` differ).
Tokenizing runs in polars (Rust); each distinct token is hashed once with
BLAKE2b, so token hashes are the same on every machine and library version;
n-gram hashes combine token hashes by position, in numpy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

WORD = r"\w+"
WORD_OR_SYMBOL = r"\w+|[^\w\s]"
_MIX = np.random.default_rng(0x7A6B).integers(1, 2**63, size=256, dtype=np.uint64) | np.uint64(1)


@dataclass
class Tokens:
    """A corpus as one flat array of token hashes plus row offsets (CSR layout)."""

    hashes: np.ndarray  # uint64, one per token
    offsets: np.ndarray  # int64, len(docs) + 1
    strings: Any  # a polars Series of the tokens, in the same order

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def text(self, start: int, stop: int) -> str:
        """Tokens ``start:stop``, space-joined (to show an n-gram)."""
        return " ".join(self.strings.slice(start, stop - start).to_list())


def token_lists(texts: Sequence[str | None], symbols: bool = False):
    """The normalized token lists of texts, as a polars list Series."""
    import polars as pl

    s = pl.Series("t", list(texts), dtype=pl.String).fill_null("")
    wide = s.str.contains(r"[^\x00-\x7F]")
    if wide.any():  # NFKC is slow; ASCII text is already normalized
        idx = wide.arg_true()
        s = s.scatter(idx, s.gather(idx).str.normalize("NFKC"))
    return s.str.to_lowercase().str.extract_all(WORD_OR_SYMBOL if symbols else WORD)


def tokenize(texts: Sequence[str | None], symbols: bool = False) -> Tokens:
    """Tokenize a corpus into stable 64-bit token hashes (``symbols``: keep symbols as tokens).

    Tokens are grouped by a fast in-process hash, then each distinct token is
    hashed once with BLAKE2b, so the result does not depend on library versions.
    """
    import pandas as pd

    lists = token_lists(texts, symbols)
    lengths = lists.list.len().fill_null(0).to_numpy().astype(np.int64)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = lists.explode().drop_nulls()
    if len(flat) == 0:
        return Tokens(np.zeros(0, np.uint64), offsets, flat)
    codes, uniques = pd.factorize(flat.hash(0).to_numpy())
    first = np.empty(len(uniques), dtype=np.int64)
    first[codes[::-1]] = np.arange(len(codes) - 1, -1, -1)  # last write wins: each code's first token
    vocab_hashes = np.fromiter(
        (
            int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "little")
            for w in flat.gather(first).to_list()
        ),
        dtype=np.uint64,
        count=len(uniques),
    )
    return Tokens(vocab_hashes[codes], offsets, flat)


@dataclass
class Grams:
    """Word n-grams of a corpus: hashes, row offsets, and each n-gram's first token."""

    hashes: np.ndarray  # uint64
    offsets: np.ndarray  # int64, len(docs) + 1
    starts: np.ndarray  # int64 token position of each n-gram in Tokens.hashes
    n: int


def ngrams(tokens: Tokens, n: int, short: str = "drop") -> Grams:
    """Hash every run of ``n`` consecutive words inside each document.

    ``short`` says what a document with fewer than ``n`` words gives: ``drop``
    (no n-gram; decontamination) or ``whole`` (one n-gram of all its words;
    dedup shingles, so short texts still compare).
    """
    if n < 1 or n > len(_MIX):
        raise ValueError(f"n-gram size must be in 1..{len(_MIX)}, got {n}")
    lengths, total = tokens.lengths, len(tokens.hashes)
    # token t starts a full n-gram when the n-gram ends inside t's document
    doc_end = np.repeat(tokens.offsets[1:], lengths)
    starts = np.flatnonzero(np.arange(total, dtype=np.int64) + n <= doc_end)
    out = _combine(tokens.hashes, starts, np.full(len(starts), n, dtype=np.int64), n)
    counts = np.maximum(lengths - n + 1, 0)
    if short == "whole":
        short_docs = np.flatnonzero((lengths > 0) & (lengths < n))
        if len(short_docs):
            short_starts = tokens.offsets[short_docs]
            short_hashes = _combine(tokens.hashes, short_starts, lengths[short_docs], n)
            at = np.searchsorted(starts, short_starts)
            starts, out = np.insert(starts, at, short_starts), np.insert(out, at, short_hashes)
            counts[short_docs] = 1
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return Grams(out, offsets, starts, n)


def _combine(hashes: np.ndarray, starts: np.ndarray, spans: np.ndarray, n: int) -> np.ndarray:
    """One hash per (start, span): a position-weighted sum of token hashes, then a mixer."""
    with np.errstate(over="ignore"):
        if len(starts) and bool((spans == n).all()):
            # every window is full: combine shifted views of the whole array, then pick the starts
            total = len(hashes) - n + 1
            out = hashes[:total] * _MIX[0]
            for j in range(1, n):
                out += hashes[j : j + total] * _MIX[j]
            out = out[starts]
        else:
            out = np.zeros(len(starts), dtype=np.uint64)
            for j in range(n):
                inside = spans > j
                part = np.where(inside, hashes[np.where(inside, starts + j, starts)], np.uint64(0))
                part *= _MIX[j]
                out += part
        out ^= out >> np.uint64(31)
        out *= np.uint64(0x9E3779B97F4A7C15)
        out ^= out >> np.uint64(29)
    return out
