"""Helpers of the tools package: the tool-config loader and the BM25 index of the local search tool."""
