"""Reading the files a user names (model, cluster, launch, runs, profile, record files).

One rule for all of them: only a regular file is read (a FIFO would block, a device such as
/dev/zero never ends, a directory is not a file), and at most ``MAX_INPUT_BYTES``: every such
file is hand-sized text, so a larger one is refused with one line before it fills the memory.
"""

from __future__ import annotations

import codecs
import os
import stat

from hardware_catalog.errors import PlannerInputError

MAX_INPUT_BYTES = 16 * 2**20
"""16 MiB: far above any model, cluster, launch, runs or profile file (the shipped runs file is
well under 1 MiB), far below what would strain the memory."""
MAX_SHOWN = 160
"""Characters of a path or name shown in an error line (the rest elided)."""


def show(text) -> str:
    """``text`` cut to ``MAX_SHOWN`` characters for an error line (a 100,000-character name
    must not make a 100 KB line)."""
    text = str(text)
    if len(text) <= MAX_SHOWN:
        return text
    return f"{text[:100]}...{text[-40:]} ({len(text):,} characters)"


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def check_regular(path, where: str) -> os.stat_result:
    """``os.stat(path)`` when it is a regular file (links followed); else PlannerInputError.
    FileNotFoundError and other OSErrors pass through (callers word a missing file their way)."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise PlannerInputError(f"{where}: is {kind_of(st.st_mode)}; give a regular file")
    return st


def read_input_bytes(path, where: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit``; PlannerInputError (one line,
    starting with ``where``) for a special file or a larger one. OSErrors pass through."""
    st = check_regular(path, where)
    if st.st_size > limit:
        raise PlannerInputError(f"{where}: is {st.st_size:,} bytes; input files may be at most {limit:,} bytes")
    with open(path, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:  # grew after the stat
        raise PlannerInputError(f"{where}: is over {limit:,} bytes; input files may be at most {limit:,} bytes")
    return data


def read_input_text(path, where: str, limit: int = MAX_INPUT_BYTES) -> str:
    """``read_input_bytes`` decoded as UTF-8, a leading byte-order mark dropped (Notepad and
    PowerShell's Out-File write one; RFC 8259 Sec. 8.1 lets a parser ignore it). A
    UnicodeDecodeError passes through."""
    return decode_text(read_input_bytes(path, where, limit))


def decode_text(data: bytes) -> str:
    """UTF-8 text without a leading byte-order mark; UTF-16 where a UTF-16 byte-order mark says
    so (Windows PowerShell 5's '>' and Out-File write UTF-16LE with one). A UnicodeDecodeError
    passes through."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16")
    return data.decode("utf-8-sig")
