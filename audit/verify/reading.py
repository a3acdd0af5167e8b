"""Reading an export bundle (a zip or a folder) defensively: bounded lines, no crash on
corrupt bytes."""

from __future__ import annotations

import hashlib
import json
import lzma
import struct
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from audit.errors import BundleUnreadable

#: Longest line read from a JSONL member (records are bounded far below this).
MAX_LINE_BYTES = 16 << 20
#: Largest manifest read into memory.
MAX_MANIFEST_BYTES = 256 << 20

#: What the zipfile module raises on a damaged archive, at open or while a member is read:
#: bad headers and CRCs (BadZipFile), broken compressed streams (zlib/lzma errors,
#: EOFError), garbage sizes and offsets (ValueError, struct.error, OverflowError), an
#: unsupported or encrypted member (NotImplementedError, RuntimeError) and I/O errors.
#: Each of these is "the bundle is unreadable", never a traceback.
ZIP_ERRORS: tuple[type[BaseException], ...] = (
    zipfile.BadZipFile,
    zlib.error,
    lzma.LZMAError,
    EOFError,
    OSError,
    ValueError,
    struct.error,
    OverflowError,
    NotImplementedError,
    RuntimeError,
)


class Bundle:
    """The files of an export: a zip archive or a folder (flat, as the zip holds them)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._zip: zipfile.ZipFile | None = None
        if path.is_dir():
            return
        if not path.is_file():
            raise BundleUnreadable(f"{path} does not exist")
        try:
            self._zip = zipfile.ZipFile(path)
        except ZIP_ERRORS as exc:
            raise BundleUnreadable(f"{path} is not a readable zip archive ({exc})") from None

    @property
    def is_zip(self) -> bool:
        return self._zip is not None

    def names(self) -> list[str]:
        if self._zip is not None:
            return [info.filename for info in self._zip.infolist() if not info.is_dir()]
        return sorted(p.name for p in self.path.iterdir() if p.is_file())

    def open(self, name: str) -> IO[bytes]:
        """Open a member for reading; KeyError when it is absent."""
        if self._zip is not None:
            return self._zip.open(name)
        candidate = self.path / name
        if "/" in name or "\\" in name or not candidate.is_file():
            raise KeyError(name)
        return candidate.open("rb")

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()


def file_sha256(stream: IO[bytes]) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    for block in iter(lambda: stream.read(1 << 20), b""):
        digest.update(block)
        size += len(block)
    return digest.hexdigest(), size


def read_lines(bundle: Bundle, name: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of a JSONL member; undecodable bytes become U+FFFD so that a
    flipped byte surfaces as a content mismatch, not a crash. A line longer than
    MAX_LINE_BYTES (an audit record never is) comes back cut, so it fails to parse
    instead of filling memory."""
    with bundle.open(name) as stream:
        number = 0
        while True:
            raw = stream.readline(MAX_LINE_BYTES)
            if not raw:
                return
            number += 1
            if len(raw) == MAX_LINE_BYTES and not raw.endswith(b"\n"):
                while (rest := stream.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                    pass  # skip the rest of the oversized line
            text = raw.decode("utf-8", errors="replace")
            if text.endswith("\n"):
                text = text[:-1]
            yield number, text


def parsed_lines(bundle: Bundle, name: str) -> Iterator[dict[str, Any]]:
    for _, text in read_lines(bundle, name):
        try:
            entry = json.loads(text)
        except ValueError:
            continue
        if isinstance(entry, dict):
            yield entry
