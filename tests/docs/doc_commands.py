"""The shell commands of README.md and docs/*.md, parsed the way a shell would read them.

Each fenced ``bash`` / ``sh`` / ``shell`` block is split into commands: backslash continuations joined, here-documents
kept with their command, ``# ...`` comments dropped, leading ``VAR=value`` words taken as the command's environment
and a trailing ``&`` (a server started in the background) noted. ``tests/docs/test_documented_commands.py`` runs each
one in a shortened form.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_FENCE = re.compile(r"^```(bash|sh|shell)\s*$")
_HEREDOC = re.compile(r"<<-?\s*'?\"?(\w+)'?\"?")
_ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass
class DocCommand:
    """One command of a documentation page: where it is, its words and its environment."""

    file: str  # relative to the repository root
    line: int  # 1-based line of its first line in the file
    text: str  # as written (continuations joined)
    env: dict[str, str] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)
    heredoc: str | None = None  # the here-document's body, if any
    background: bool = False

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"


def doc_files() -> list[str]:
    """README.md and every page under docs/, relative to the repository root."""
    return ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))


def _open_quote(text: str) -> bool:
    try:
        shlex.split(text, comments=True)
    except ValueError:
        return True
    return False


def _chain(text: str) -> list[str]:
    """``a && b`` / ``a; b`` -> ``[a, b]`` (outside quotes)."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    parts, current = [], []
    for token in lexer:
        if token in ("&&", ";"):
            parts.append(shlex.join(current))
            current = []
        else:
            current.append(token)
    parts.append(shlex.join(current))
    return [p for p in parts if p] if len(parts) > 1 else [text]


_BRACKETED = re.compile(r"<[^<>\n]*>")


_REDIRECT = re.compile(r"^(\d?>>?|<|&>)$")


def _without_redirections(words: list[str]) -> list[str]:
    """``cmd > file`` / ``2> file`` -> ``cmd``: a redirection is the shell's, not the program's."""
    out, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif _REDIRECT.match(word):
            skip = True
        elif not re.match(r"^\d?>&\d$", word):
            out.append(word)
    return out


def _split(text: str) -> tuple[dict[str, str], list[str], bool]:
    # ``<student dir>`` is one word to fill in, spaces and all
    words = shlex.split(_BRACKETED.sub(lambda m: m.group(0).replace(" ", "_"), text), comments=True)
    background = bool(words) and words[-1] == "&"
    if background:
        words = words[:-1]
    elif words and words[-1].endswith("&") and not words[-1].endswith("&&"):
        words[-1], background = words[-1][:-1], True
    words = _without_redirections(words)
    env = {}
    while words and _ENV_WORD.match(words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    return env, words, background


def parse_page(path: str) -> list[DocCommand]:
    """The commands of the page at ``path`` (relative to the repository root), in order."""
    lines = open(os.path.join(ROOT, path), encoding="utf-8").read().splitlines()
    commands: list[DocCommand] = []
    i = 0
    while i < len(lines):
        if not _FENCE.match(lines[i].strip()):
            i += 1
            continue
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            start, text = i, lines[i]
            while text.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                text = text.rstrip()[:-1] + " " + lines[i].strip()
            i += 1
            while _open_quote(text) and i < len(lines) and lines[i].strip() != "```":  # a quoted string goes on
                text += "\n" + lines[i]
                i += 1
            if not text.strip() or text.strip().startswith("#"):
                continue
            heredoc = None
            marker = _HEREDOC.search(text)
            if marker:
                body = []
                while i < len(lines) and lines[i].strip() != marker.group(1):
                    body.append(lines[i])
                    i += 1
                i += 1
                heredoc = "\n".join(body) + "\n"
                text = text[: marker.start()].rstrip()
            for part in _chain(text):
                env, argv, background = _split(part)
                commands.append(DocCommand(path, start + 1, part.strip(), env, argv, heredoc, background))
        i += 1
    return commands


def all_commands() -> list[DocCommand]:
    """Every documented command of README.md and docs/*.md."""
    return [c for path in doc_files() for c in parse_page(path)]
