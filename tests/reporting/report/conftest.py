"""A headless Chromium for the report tests: render ``report.html`` and read back the DOM the browser built.

No chromium binary: the tests that need it skip with the reason, unless ``VERL_REQUIRE_BROWSER=1`` (CI installs
Debian's ``chromium`` and sets it), which makes a missing browser a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest

BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# headless, offline, no profile state: the page must render from the file alone
BROWSER_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def find_browser() -> str | None:
    """The first Chromium-family binary on PATH (or /usr/bin/chromium), else None."""
    for name in BROWSER_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None


@dataclass
class Dom:
    """What the browser's serialised DOM holds: tag counts, element ids, tags inside each id, text of each id."""

    html: str
    tags: Counter = field(default_factory=Counter)
    ids: set[str] = field(default_factory=set)
    tags_in: dict[str, Counter] = field(default_factory=dict)
    text_in: dict[str, str] = field(default_factory=dict)
    svg_paths: list[int] = field(default_factory=list)  # <path> elements per <svg>
    attrs: list[tuple[str, str, str]] = field(default_factory=list)  # (tag, attribute, value)


class _DomParser(HTMLParser):
    VOID = {"meta", "br", "img", "input", "link", "hr", "col", "source", "area", "base", "wbr"}

    def __init__(self, dom: Dom) -> None:
        super().__init__(convert_charrefs=True)
        self.dom = dom
        self.stack: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._open(tag, attrs, void=tag in self.VOID)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._open(tag, attrs, void=True)

    def _open(self, tag: str, attrs: list[tuple[str, str | None]], void: bool) -> None:
        dom = self.dom
        dom.tags[tag] += 1
        for name, value in attrs:
            dom.attrs.append((tag, name, value or ""))
        for open_id in {i for _, i in self.stack if i}:
            dom.tags_in.setdefault(open_id, Counter())[tag] += 1
        if tag == "svg":
            dom.svg_paths.append(0)
        if tag == "path" and any(t == "svg" for t, _ in self.stack):
            dom.svg_paths[-1] += 1
        element_id = dict(attrs).get("id")
        if element_id:
            dom.ids.add(element_id)
        if not void:
            self.stack.append((tag, element_id))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        for open_id in {i for _, i in self.stack if i}:
            self.dom.text_in[open_id] = self.dom.text_in.get(open_id, "") + data


def parse_dom(html: str) -> Dom:
    """Parse serialised HTML into a :class:`Dom`."""
    dom = Dom(html)
    _DomParser(dom).feed(html)
    return dom


class Browser:
    """Runs the headless browser on local files."""

    def __init__(self, binary: str, profile: Path) -> None:
        self.binary = binary
        self.profile = profile

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        cmd = [self.binary, *BROWSER_FLAGS, f"--user-data-dir={self.profile}", *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, f"{cmd} exited {proc.returncode}: {proc.stderr[-2000:]}"
        return proc

    def dump_dom(self, page: Path) -> Dom:
        """The DOM after the browser loaded ``page`` (``--dump-dom``), parsed."""
        return parse_dom(self._run("--dump-dom", page.resolve().as_uri()).stdout)

    def screenshot(self, page: Path, png: Path, size: str = "1300,3000") -> Path:
        self._run(f"--window-size={size}", f"--screenshot={png}", page.resolve().as_uri())
        return png


@pytest.fixture
def browser(tmp_path: Path) -> Browser:
    """A headless Chromium; skips (or fails under VERL_REQUIRE_BROWSER=1) when there is none."""
    binary = find_browser()
    if binary is None:
        if os.environ.get("VERL_REQUIRE_BROWSER") == "1":
            pytest.fail("VERL_REQUIRE_BROWSER=1 but no chromium binary was found (apt-get install -y chromium)")
        pytest.skip("no chromium binary found (apt-get install -y chromium; VERL_REQUIRE_BROWSER=1 makes this fail)")
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    return Browser(binary, profile)
