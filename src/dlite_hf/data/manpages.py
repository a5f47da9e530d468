"""On-disk source ``manpages``: sections 1, 5 and 8 of the machine's manual pages rendered with ``groff``, for the
mix's ``manpages`` and ``text_manpages`` domains (pages named after Python, links and reserved sources skipped)."""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
import re
import subprocess
from pathlib import Path

from .common import MAX_PROMPT_CHARS, TEXT_CHUNK_CHARS, Prompt, cut, prompt, text_item, user
from .sources import SOURCES, is_reserved

_MAN_ROOT = Path(SOURCES["manpages"].path)
_MAN_SECTIONS = ("man1", "man5", "man8")


@functools.cache
def _man_pages() -> tuple[tuple[str, Path], ...]:
    pages = []
    for section in _MAN_SECTIONS:
        for path in sorted((_MAN_ROOT / section).glob("*.gz")):
            if "python" in path.name.lower() or path.is_symlink() or is_reserved(path.name):
                continue
            pages.append((path.name.removesuffix(".gz"), path))
    return tuple(pages)


@functools.cache
def render_man(path: Path) -> str:
    """A manual page as plain text (``groff -man -Tascii``, overstrikes removed); empty when it cannot render.
    Cached by content (``<cache>/manpages/<sha1>.txt``): rendering every page takes minutes."""
    from ..assets import cache_dir

    try:
        raw = path.read_bytes()
    except OSError:
        return ""
    cached = cache_dir() / "manpages" / f"{hashlib.sha1(raw).hexdigest()}.txt"
    if cached.is_file():
        return cached.read_text(encoding="utf-8")
    try:
        source = gzip.decompress(raw)
        if source.startswith(b".so "):
            text = ""
        else:
            done = subprocess.run(
                ["groff", "-man", "-Tascii", "-P", "-c", "-P", "-b", "-P", "-u"],
                input=source,
                capture_output=True,
                timeout=20,
                check=False,
            )
            text = done.stdout.decode("utf-8", "replace") if done.returncode == 0 else ""
            text = re.sub(r"\n{3,}", "\n\n", text).strip()
    except (OSError, EOFError, subprocess.TimeoutExpired, gzip.BadGzipFile):
        return ""  # groff missing or a broken page: not cached, so a fixed machine renders it next time
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(f".{os.getpid()}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, cached)
    return text


def _rendered(held: frozenset[str] = frozenset()):
    """(group id, command name, path, text) of every page outside ``held`` whose text is long enough to use."""
    for name, path in _man_pages():
        gid = f"man/{name}"
        text = "" if gid in held else render_man(path)
        if len(text) >= 600:
            yield gid, name.rsplit(".", 1)[0], path, text


def manpages() -> list[tuple[str, list[Prompt]]]:
    """The ``manpages`` domain: explain a command from the start of its manual page, one group per page."""
    out = []
    for gid, name, path, text in _rendered():
        page = cut(text, MAX_PROMPT_CHARS - 300)
        request = (
            f"Here is the start of the manual page of `{name}`.\n\n{page}\n\nExplain what `{name}` is for, then give "
            "three example invocations with what each does."
        )
        out.append((gid, [prompt(gid, "manpages", f"man:{path}", [user(request)])]))
    return out


def text_manpages(held: frozenset[str]) -> list[tuple[str, list[Prompt]]]:
    """The ``text_manpages`` domain: the pages outside ``manpages``' eval groups, as text."""
    out = []
    for gid, name, path, text in _rendered(held):
        request, reply = f"Show the manual page of `{name}`.", cut(text, TEXT_CHUNK_CHARS * 2)
        out.append((gid, [text_item(f"text/{gid}", "text_manpages", f"man:{path}", request, reply)]))
    return out
