"""Near-duplicate pairs with MinHash LSH: rensa sketches, numpy banding, scipy components.

rensa computes the MinHash signatures of a whole corpus in one call and flags,
in Rust, every document that shares an LSH band with another. Only the
flagged few are brought into numpy, where their bands are grouped to list the
candidate pairs; a pair is kept when its estimated Jaccard similarity (the
share of equal signature slots) reaches the threshold. The result does not
depend on the order documents arrive in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trajkit.curate.ngrams import Grams, Tokens, ngrams


@dataclass(frozen=True)
class LSHParams:
    """MinHash LSH parameters: ``bands`` bands of ``num_perm // bands`` slots each
    (``bands=None``: chosen for the threshold by ``optimal_bands``)."""

    threshold: float = 0.7
    num_perm: int = 128
    bands: int | None = None
    shingle: int = 3
    seed: int = 0

    def __post_init__(self) -> None:
        if self.bands is None:
            object.__setattr__(self, "bands", optimal_bands(self.threshold, self.num_perm))
        if self.num_perm % self.bands:
            raise ValueError(f"num_perm ({self.num_perm}) must be a multiple of bands ({self.bands})")


def optimal_bands(threshold: float, num_perm: int) -> int:
    """The band count (a divisor of ``num_perm``) minimizing the equally weighted areas of
    false positives below and false negatives above the threshold, as datasketch chooses."""
    x = np.linspace(0.0, 1.0, 2001)
    below, above = x <= threshold, x >= threshold
    best, best_err = 1, np.inf
    for b in (d for d in range(1, num_perm + 1) if num_perm % d == 0):
        p = 1.0 - (1.0 - x ** (num_perm // b)) ** b  # probability of sharing a band at similarity x
        err = np.trapezoid(p[below], x[below]) + np.trapezoid(1.0 - p[above], x[above])
        if err < best_err:
            best, best_err = b, err
    return best


def signatures(grams: Grams, rows: np.ndarray, params: LSHParams):
    """rensa's digest matrix of the given documents' word shingles."""
    import rensa

    lengths = np.diff(grams.offsets)[rows]
    offsets = np.zeros(len(rows) + 1, dtype=np.uint64)
    np.cumsum(lengths, out=offsets[1:])
    starts = grams.offsets[:-1][rows]
    # gather each selected document's slice of the flat n-gram array in one vectorized step
    within = np.arange(int(offsets[-1]), dtype=np.int64) - np.repeat(offsets[:-1].astype(np.int64), lengths)
    flat = grams.hashes[np.repeat(starts, lengths) + within]
    return rensa.RMinHash.digest_matrix_from_flat_token_hashes(flat, offsets, params.num_perm, params.seed)


def near_duplicate_pairs(tokens: Tokens, params: LSHParams, rows: np.ndarray | None = None) -> np.ndarray:
    """Pairs ``(i, j)``, ``i < j``, of documents whose estimated Jaccard similarity is at least
    the threshold, as an ``(m, 2)`` int64 array sorted by row. ``rows`` limits the search
    to some documents (empty documents are never near-duplicates)."""
    import rensa

    rows = np.arange(len(tokens.lengths)) if rows is None else np.asarray(rows, dtype=np.int64)
    rows = rows[tokens.lengths[rows] > 0]
    if len(rows) < 2:
        return np.zeros((0, 2), dtype=np.int64)
    grams = ngrams(tokens, params.shingle, short="whole")
    lsh = rensa.RMinHashLSH(params.threshold, params.num_perm, params.bands)
    flags = np.asarray(lsh.query_duplicate_flags_matrix_one_shot(signatures(grams, rows, params)), dtype=bool)
    cand = rows[flags]
    if len(cand) < 2:
        return np.zeros((0, 2), dtype=np.int64)
    sig = np.asarray(signatures(grams, cand, params).to_rows(), dtype=np.uint32)
    pairs = _band_pairs(sig, params.bands)
    if not len(pairs):
        return np.zeros((0, 2), dtype=np.int64)
    similarity = (sig[pairs[:, 0]] == sig[pairs[:, 1]]).mean(axis=1)
    found = cand[pairs[similarity >= params.threshold]]  # cand is sorted, so pairs stay (i < j)
    return found[np.lexsort((found[:, 1], found[:, 0]))] if len(found) else np.zeros((0, 2), dtype=np.int64)


def _band_pairs(sig: np.ndarray, bands: int) -> np.ndarray:
    """Index pairs (into ``sig``) of rows equal on at least one band.

    Within a bucket of equal bands each row is paired with the bucket's first
    row and with its predecessor: at most two pairs per row and band, so a
    corpus full of copies stays linear, and the bucket stays connected.
    """
    width = sig.shape[1] // bands
    coeff = np.random.default_rng(1).integers(1, 2**63, size=width, dtype=np.uint64) | np.uint64(1)
    n = len(sig)
    keys = []
    with np.errstate(over="ignore"):
        for b in range(bands):
            band = sig[:, b * width : (b + 1) * width].astype(np.uint64)
            key = (band * coeff).sum(axis=1, dtype=np.uint64)
            order = np.lexsort((np.arange(n), key))
            ks = key[order]
            same = ks[1:] == ks[:-1]
            if not same.any():
                continue
            starts = np.flatnonzero(np.concatenate([[True], ~same]))
            head = order[starts[np.cumsum(np.concatenate([[True], ~same])) - 1]]
            for left, right in ((order[:-1][same], order[1:][same]), (head[1:][same], order[1:][same])):
                # the key is a hash of the band: confirm the bands are really equal
                equal = (band[left] == band[right]).all(axis=1) & (left != right)
                keys.append(np.minimum(left, right)[equal] * n + np.maximum(left, right)[equal])
    if not keys:
        return np.zeros((0, 2), dtype=np.int64)
    flat = np.unique(np.concatenate(keys).astype(np.int64))
    return np.stack([flat // n, flat % n], axis=1)


def components(n: int, pairs: np.ndarray) -> np.ndarray:
    """Connected-component label of each of ``n`` items linked by ``pairs``."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    if not len(pairs):
        return np.arange(n)
    graph = coo_matrix((np.ones(len(pairs), dtype=np.int8), (pairs[:, 0], pairs[:, 1])), shape=(n, n))
    return connected_components(graph, directed=False)[1]
