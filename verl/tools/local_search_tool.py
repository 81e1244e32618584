"""A retrieval tool over a corpus on disk (search-R1 style), with a BM25 index built when the tool is created.

The corpus is a JSON-lines file, one document per line: ``{"contents": "Title\\ntext"}`` (search-R1's wiki
format) or ``{"title": ..., "text": ...}``. The tool takes ``query_list`` (a list of queries, as verl's search
tool does) and answers, for each query, the ``topk`` best documents as ``Doc 1(Title: ...) text``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Optional

from verl.base_config import omega_conf_to_dataclass
from verl.tools.base_tool import BaseTool, ToolConfig, ToolResult
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.tools.utils.bm25 import BM25Index

__all__ = ["LocalSearchTool", "load_corpus"]


def load_corpus(path: str) -> list[tuple[str, str]]:
    """``(title, text)`` of every document of the JSON-lines corpus ``path``; errors name the file and line."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"LocalSearchTool: corpus_path={path!r} is not a file")
    docs: list[tuple[str, str]] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON: {e}") from e
            if isinstance(row, dict) and isinstance(row.get("contents"), str):
                title, _, text = row["contents"].partition("\n")
                docs.append((title.strip().strip('"'), text.strip()))
            elif isinstance(row, dict) and isinstance(row.get("text"), str):
                docs.append((str(row.get("title", "")), row["text"]))
            else:
                raise ValueError(f"{path}:{lineno}: a document needs a 'contents' or 'text' string field")
    if not docs:
        raise ValueError(f"LocalSearchTool: corpus {path!r} holds no documents")
    return docs


@dataclass
class LocalSearchToolConfig(ToolConfig):
    """``config`` of a search tool entry."""

    corpus_path: Optional[str] = None  # required: a JSON-lines corpus file
    topk: int = 3
    max_queries: int = 5  # more queries in one call are refused


class LocalSearchTool(BaseTool):
    """``search(query_list)``: BM25 retrieval over ``config.corpus_path``.

    Config keys (:class:`LocalSearchToolConfig`): ``corpus_path`` (required), ``topk``, ``max_queries`` (more queries
    in one call are refused). Metrics of a call: ``num_queries``, ``num_hits``.
    """

    def __init__(self, config: dict[str, Any] | None, tool_schema: OpenAIFunctionToolSchema | None) -> None:
        super().__init__(config, tool_schema)
        if not self.config.get("corpus_path"):
            raise ValueError("LocalSearchTool: config.corpus_path (a JSON-lines corpus file) is required")
        cfg = omega_conf_to_dataclass(self.config, LocalSearchToolConfig)
        self.topk = int(cfg.topk)
        self.max_queries = int(cfg.max_queries)
        if self.topk < 1 or self.max_queries < 1:
            raise ValueError(f"LocalSearchTool: topk={self.topk} and max_queries={self.max_queries} must be >= 1")
        self.docs = load_corpus(str(self.config["corpus_path"]))
        self.index = BM25Index([f"{title} {text}" for title, text in self.docs])

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        return OpenAIFunctionToolSchema.model_validate(
            {
                "type": "function",
                "function": {
                    "name": "search",
                    "description": "Search a document collection; returns the best passages for each query.",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "query_list": {"type": "array", "items": {"type": "string"}, "description": "queries"}
                        },
                        "required": ["query_list"],
                    },
                },
            }
        )

    def search(self, query: str) -> str:
        """The formatted ``topk`` passages for one query (``No results.`` when nothing matches)."""
        hits = self.index.search(query, self.topk)
        if not hits:
            return "No results."
        return "\n".join(f"Doc {k}(Title: {self.docs[i][0]}) {self.docs[i][1]}" for k, (i, _) in enumerate(hits, 1))

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> ToolResult:
        queries = parameters.get("query_list")
        if isinstance(queries, str):
            queries = [queries]
        if not isinstance(queries, list) or not queries or not all(isinstance(q, str) for q in queries):
            return ToolResponse(text="Error: 'query_list' must be a non-empty list of strings"), 0.0, {"ok": False}
        if len(queries) > self.max_queries:
            text = f"Error: at most {self.max_queries} queries per call, got {len(queries)}"
            return ToolResponse(text=text), 0.0, {"ok": False}
        parts = [self.search(q) for q in queries]
        text = parts[0] if len(parts) == 1 else "\n---\n".join(parts)
        hits = sum(0 if p == "No results." else p.count("Doc ") for p in parts)
        return ToolResponse(text=text), 0.0, {"ok": True, "num_queries": len(queries), "num_hits": hits}
