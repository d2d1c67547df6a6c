"""Benchmark: trajkit's near-dup dedup and 13-gram decontamination against their usual peers.

    .venv/bin/python bench/dedup.py            # 100k synthetic questions
    .venv/bin/python bench/dedup.py --n 20000  # a quicker run

1. MinHash LSH near-duplicates: ``trajkit.curate.dedup.find_duplicates`` (near
   only) against datasketch's own ``MinHash.bulk`` + ``MinHashLSH`` (insertion
   session, then a query per document), on the same questions, the same word
   3-shingles (words and symbols, lowercased), 128 permutations and the same
   (bands, rows). Both times include tokenizing. datasketch returns LSH
   candidates; trajkit also checks each pair's estimated Jaccard similarity.
2. 13-gram decontamination against HumanEval + BFCL: ``NgramIndex`` against
   the classic pure-Python check (a set of 13-word tuples, every window of
   every question looked up), on the same words.

Prints docs/s for each side, the ratio, and how many planted duplicates and
contaminated questions each side found (the work must agree, not just be fast).
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trajkit.curate.decontaminate import NgramIndex
from trajkit.curate.dedup import find_duplicates
from trajkit.curate.evalsets import bfcl_texts, humaneval_texts
from trajkit.curate.minhash import LSHParams

TEMPLATES = [
    "Write a function that takes a list of {a} and returns the {b} of the {c} values, ignoring {d}.",
    "Given a string of {a}, find the longest substring in which every {b} appears at most {n} times.",
    "A shop sells {a} for {n} dollars each and {b} for {m} dollars each. How much do {k} {a} and {k} {b} cost?",
    "Use the {a} tool to look up the {b} of {c}, then convert it to {d} and store it under the key '{e}'.",
    "Implement a class that keeps the {n} most recent {a} and answers queries for the {b} {c} in O(log n).",
]
WORDS = [f"{p}{s}" for p in ("alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta") for s in range(300)]
TOKEN = re.compile(r"\w+|[^\w\s]")
WORD = re.compile(r"\w+")


def questions(n: int, seed: int = 0) -> tuple[list[str], list[tuple[int, int]], set[int]]:
    """``n`` questions: ~10% near copies (one word changed), ~2% containing an eval-set sentence."""
    rng = random.Random(seed)
    fill = lambda: {k: " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3))) for k in "abcde"}
    out, planted, dirty = [], [], set()
    evals = humaneval_texts()[0::2] + bfcl_texts()
    for i in range(n):
        r = rng.random()
        if r < 0.10 and out:
            j = rng.randrange(len(out))
            words = out[j].split()
            words[rng.randrange(len(words))] = rng.choice(WORDS)
            out.append(" ".join(words))
            planted.append((j, i))
            continue
        q = rng.choice(TEMPLATES).format(**fill(), n=rng.randint(2, 99), m=rng.randint(2, 99), k=rng.randint(2, 9))
        q += " " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 20)))
        if r > 0.98:
            q = f"{q} Also: {rng.choice(evals)}"
            dirty.add(i)
        out.append(q)
    return out, planted, dirty


def timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def datasketch_pairs(texts: list[str], params: LSHParams) -> set[tuple[int, int]]:
    """datasketch as its docs show it: MinHash.bulk, then MinHashLSH insert and query."""
    from datasketch import MinHash, MinHashLSH

    shingles = []
    for t in texts:
        toks = TOKEN.findall(t.lower())
        s = params.shingle
        grams = [" ".join(toks[i : i + s]) for i in range(max(len(toks) - s + 1, 1))] if toks else []
        shingles.append([g.encode() for g in grams])
    hashes = MinHash.bulk(shingles, num_perm=params.num_perm, seed=params.seed)
    lsh = MinHashLSH(
        threshold=params.threshold, num_perm=params.num_perm, params=(params.bands, params.num_perm // params.bands)
    )
    with lsh.insertion_session() as session:
        for i, m in enumerate(hashes):
            session.insert(i, m)
    pairs = set()
    for i, m in enumerate(hashes):
        for j in lsh.query(m):
            if j != i:
                pairs.add((min(i, j), max(i, j)))
    return pairs


def trajkit_clusters(texts: list[str], params: LSHParams) -> list[int]:
    """The kept document of each document's near-duplicate cluster."""
    found = find_duplicates(texts, [f"{i:08d}" for i in range(len(texts))], params, exact=False, near=True)
    return found.kept.tolist()


def python_decontaminate(evals: list[str], texts: list[str], n: int) -> list[bool]:
    """The classic check: every n-word window of the eval sets in a set, every window of a text looked up."""
    grams = set()
    for e in evals:
        w = WORD.findall(e.lower())
        grams.update(tuple(w[i : i + n]) for i in range(len(w) - n + 1))
    out = []
    for t in texts:
        w = WORD.findall(t.lower())
        out.append(any(tuple(w[i : i + n]) in grams for i in range(len(w) - n + 1)))
    return out


def trajkit_decontaminate(evals: dict[str, list[str]], texts: list[str], n: int) -> list[bool]:
    index = NgramIndex(n)
    for name, e in evals.items():
        index.add(name, e)
    return [m is not None for m in index.match(texts)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="Synthetic questions.")
    ap.add_argument("--threshold", type=float, default=0.7)
    args = ap.parse_args()
    texts, planted, dirty = questions(args.n)
    params = LSHParams(threshold=args.threshold)
    rows_per_band = params.num_perm // params.bands
    print(f"{args.n} questions, {len(planted)} planted near copies, {len(dirty)} contaminated; "
          f"MinHash {params.num_perm} perms, {params.bands} bands x {rows_per_band} rows, word {params.shingle}-shingles")  # fmt: skip

    evals = {"humaneval": humaneval_texts(), "bfcl": bfcl_texts()}
    all_evals = [t for e in evals.values() for t in e]
    # warm up: imports and first-call setup are not throughput
    trajkit_clusters(texts[:500], params), datasketch_pairs(texts[:500], params)
    trajkit_decontaminate(evals, texts[:500], 13), python_decontaminate(all_evals[:10], texts[:500], 13)
    ours, t_ours = timed(trajkit_clusters, texts, params)
    peer, t_peer = timed(datasketch_pairs, texts, params)
    dc_ours, t_dc_ours = timed(trajkit_decontaminate, evals, texts, 13)
    dc_peer, t_dc_peer = timed(python_decontaminate, all_evals, texts, 13)

    def recall(pairs: set) -> str:
        return f"{sum(p in pairs for p in planted) / max(len(planted), 1):.1%} of planted pairs, {len(pairs)} candidate pairs"

    def recall_clusters(kept: list[int]) -> str:
        same = sum(kept[a] == kept[b] for a, b in planted) / max(len(planted), 1)
        return f"{same:.1%} of planted pairs, {sum(k != i for i, k in enumerate(kept))} duplicates"

    def hits(flags: list[bool]) -> str:
        found = {i for i, f in enumerate(flags) if f}
        return f"{len(found & dirty)}/{len(dirty)} planted, {len(found - dirty)} other"

    table = [
        ("near-dup: trajkit (rensa + numpy LSH)", args.n / t_ours, t_ours, recall_clusters(ours)),
        ("near-dup: datasketch MinHash + MinHashLSH", args.n / t_peer, t_peer, recall(peer)),
        ("13-gram decon: trajkit NgramIndex", args.n / t_dc_ours, t_dc_ours, hits(dc_ours)),
        ("13-gram decon: Python set of tuples", args.n / t_dc_peer, t_dc_peer, hits(dc_peer)),
    ]
    print(f"\n{'':44} {'docs/s':>10} {'seconds':>8}  found")
    for name, rate, secs, found in table:
        print(f"{name:44} {rate:>10,.0f} {secs:>8.2f}  {found}")
    print(f"\nnear-dup speedup over datasketch: {t_peer / t_ours:.1f}x   (goal >= 10x)")
    print(f"decontamination speedup over pure Python: {t_dc_peer / t_dc_ours:.1f}x")
    print("(decontamination times include indexing the eval sets: "
          f"{sum(len(e) for e in evals.values())} texts of HumanEval and BFCL)")  # fmt: skip


if __name__ == "__main__":
    main()
