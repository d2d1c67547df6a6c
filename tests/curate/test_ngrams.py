"""Tokens and n-grams: the same tokens as Python's regex, hashes that depend only on the text."""

from __future__ import annotations

import hashlib
import re
import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from trajkit.curate.ngrams import WORD, WORD_OR_SYMBOL, ngrams, tokenize

TEXT = st.text(alphabet=st.sampled_from("aZ9_ ,.+-?\n\tßéÉﬁ—“”中文ＡＢ１"), max_size=30)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), TEXT), max_size=8), st.booleans())
def test_tokens_are_the_regex_tokens_of_the_normalized_text(texts, symbols):
    tokens = tokenize(texts, symbols=symbols)
    pattern = re.compile(WORD_OR_SYMBOL if symbols else WORD)
    for i, text in enumerate(texts):
        want = pattern.findall(unicodedata.normalize("NFKC", text or "").lower())
        assert tokens.text(tokens.offsets[i], tokens.offsets[i + 1]) == " ".join(want)


def test_hashes_depend_on_the_token_not_the_corpus():
    a = tokenize(["the cat sat on the mat"])
    b = tokenize(["a dog", "THE CAT sat   on the mat!"])
    assert a.hashes.tolist() == b.hashes[b.offsets[1] :].tolist()
    assert a.hashes[0] == a.hashes[4] and len(set(a.hashes.tolist())) == 5
    # fixed values: a change here changes every stored dedup result
    assert tokenize(["hello"]).hashes.tolist() == [
        int.from_bytes(hashlib.blake2b(b"hello", digest_size=8).digest(), "little")
    ]


def test_ngrams_drop_or_keep_short_documents():
    tokens = tokenize(["one two three four", "one two", "", "two three four"])
    drop, whole = ngrams(tokens, 3, "drop"), ngrams(tokens, 3, "whole")
    assert drop.offsets.tolist() == [0, 2, 2, 2, 3] and whole.offsets.tolist() == [0, 2, 3, 3, 4]
    assert drop.hashes[1] == drop.hashes[2]  # "two three four" in both documents
    assert drop.hashes[0] != drop.hashes[1] and whole.hashes[2] not in drop.hashes
    assert tokens.text(int(drop.starts[1]), int(drop.starts[1]) + 3) == "two three four"
