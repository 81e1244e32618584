"""A small Okapi BM25 index (Robertson & Zaragoza, 2009) over a list of documents, for the local search tool.

Tokens are lower-cased runs of letters and digits. ``score(q, d) = sum_t idf(t) * tf(t, d) * (k1 + 1) /
(tf(t, d) + k1 * (1 - b + b * |d| / avgdl))`` with ``idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))``.
"""

from __future__ import annotations

import math
import re
from collections import Counter

__all__ = ["BM25Index", "tokenize"]

_TOKEN = re.compile(r"[0-9a-z]+")


def tokenize(text: str) -> list[str]:
    """Lower-cased alphanumeric tokens of ``text``."""
    return _TOKEN.findall(text.lower())


class BM25Index:
    """BM25 over ``documents`` (strings); :meth:`search` returns ``(doc index, score)`` pairs, best first."""

    def __init__(self, documents: list[str], k1: float = 1.5, b: float = 0.75) -> None:
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25Index: k1={k1} must be >= 0 and b={b} in [0, 1]")
        self.k1, self.b = k1, b
        self.doc_tf: list[Counter[str]] = [Counter(tokenize(d)) for d in documents]
        self.doc_len = [sum(tf.values()) for tf in self.doc_tf]
        self.avgdl = (sum(self.doc_len) / len(self.doc_len)) if self.doc_len else 0.0
        df: Counter[str] = Counter()
        self.postings: dict[str, list[int]] = {}
        for i, tf in enumerate(self.doc_tf):
            for term in tf:
                df[term] += 1
                self.postings.setdefault(term, []).append(i)
        n = len(documents)
        self.idf = {term: math.log(1.0 + (n - f + 0.5) / (f + 0.5)) for term, f in df.items()}

    def __len__(self) -> int:
        return len(self.doc_tf)

    def search(self, query: str, topk: int = 3) -> list[tuple[int, float]]:
        """The ``topk`` documents with a positive score for ``query`` (ties: lower index first)."""
        scores: dict[int, float] = {}
        for term in set(tokenize(query)):
            idf = self.idf.get(term)
            if idf is None:
                continue
            for i in self.postings[term]:
                tf = self.doc_tf[i][term]
                norm = tf + self.k1 * (1 - self.b + self.b * self.doc_len[i] / (self.avgdl or 1.0))
                scores[i] = scores.get(i, 0.0) + idf * tf * (self.k1 + 1) / norm
        ranked = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
        return [(i, s) for i, s in ranked[: max(0, int(topk))] if s > 0]
