"""Files planner writes: one overwrite rule and one way to write them.

The rule, for every file a command writes (``search --csv/--export/--plot``, ``export --out``,
``evaluate/validate/comm --plot``, ``sweep --csv/--plot``): an existing file is replaced only
with ``--force``, and every output is checked before any work is done (its directory exists and
takes a new file, it is not a directory), so a refused output costs nothing and a search never
runs for results it cannot write. Files are written to a temporary sibling and renamed into
place: a failure never leaves half a file. Only regular files are written or replaced: a FIFO,
a device (/dev/null, /dev/full) or a socket at the path is refused even with ``--force`` (the
rename would replace the special file itself with a regular one). Every atomic writer of planner
(tables, plots, launch files, profiles) goes through this module.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Callable, Iterable, Optional

from hardware_catalog.errors import PlannerInputError
from hardware_catalog.files import kind_of, show


def _probe(directory: Path, flag: str, path: Path) -> None:
    """Create and remove a temporary file in ``directory``: a read-only or immutable directory,
    a read-only file system or /proc refuse here, before any work."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".planner-probe-", dir=directory)
        os.close(fd)
        os.unlink(tmp)
    except OSError as err:
        raise PlannerInputError(f"{flag} {show(path)}: cannot write in {show(directory)} ({err.strerror or err})") from None


def _existing_ancestor(path: Path) -> Path:
    for parent in [path, *path.parents]:
        if parent.exists():
            return parent
    return Path(".")


def _mode(path: Path, flag: str) -> Optional[int]:
    """The file type bits of ``path`` (links followed), None when nothing is there."""
    try:
        return os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as err:  # a name too long, a loop of links, a file in place of a folder
        raise PlannerInputError(f"{flag} {show(path)}: cannot be written ({err.strerror or err})") from None


def refuse_special(path: Path, flag: str) -> None:
    """PlannerInputError when something other than a regular file is at ``path``."""
    mode = _mode(path, flag)
    if mode is not None and not stat.S_ISREG(mode):
        what = kind_of(mode)
        hint = "give a file name" if stat.S_ISDIR(mode) else "planner writes regular files only, even with --force"
        raise PlannerInputError(f"{flag} {show(path)}: is {what}; {hint}")


def check_output_file(path, flag: str, force: bool) -> Optional[Path]:
    """``path`` (None: no file asked for) if it may be written now, else ``PlannerInputError``
    naming ``flag``: it exists and ``force`` is off, it is a directory or another special file
    (FIFO, device, socket: never replaced), or its directory is missing or refuses new files."""
    if path is None:
        return None
    path = Path(path)
    refuse_special(path, flag)
    parent = path.parent
    if not parent.is_dir():
        raise PlannerInputError(f"{flag} {show(path)}: directory {show(parent)} does not exist")
    if _mode(path, flag) is not None and not force:
        raise PlannerInputError(f"{flag} {show(path)} already exists: pass --force to overwrite it")
    _probe(parent, flag, path)
    return path


def check_distinct(*outputs: tuple[str, Optional[Path]]) -> None:
    """PlannerInputError when two outputs (flag, path) name one file: one would replace the other."""
    seen: dict = {}
    for flag, path in outputs:
        if path is None:
            continue
        key = os.path.realpath(path)
        if key in seen:
            raise PlannerInputError(f"{seen[key]} and {flag} name the same file {show(path)}; give each its own")
        seen[key] = flag


def check_output_dir(path, flag: str, force: bool, names: Iterable[str] = ()) -> Optional[Path]:
    """A directory to write ``names`` into (created when written): it is a directory or does not
    exist yet, its nearest existing ancestor takes new files, and none of ``names`` exists in it
    unless ``force``."""
    if path is None:
        return None
    path = Path(path)
    mode = _mode(path, flag)
    if mode is not None and not stat.S_ISDIR(mode):
        raise PlannerInputError(f"{flag} {show(path)}: exists and is not a directory")
    base = _existing_ancestor(path)
    if not base.is_dir():
        raise PlannerInputError(f"{flag} {show(path)}: {show(base)} is not a directory")
    _probe(base, flag, path)
    for name in names:
        refuse_special(path / name, flag)
    if not force:
        existing = [name for name in names if (path / name).exists()]
        if existing:
            raise PlannerInputError(f"{flag} {show(path)}: {existing[0]} already exists there: pass --force to overwrite")
    return path


def write_text_atomically(path, text: str, flag: str) -> Path:
    """``text`` (UTF-8, newlines as given) to ``path`` atomically (``write_atomically``)."""
    return write_atomically(path, lambda fh: fh.write(text.encode("utf-8")), flag)


def write_atomically(path, write: Callable, flag: str) -> Path:
    """``write(binary file)`` into a temporary sibling renamed into place (mode as a plain open()
    would give); ``PlannerInputError`` naming ``flag`` when it cannot be written."""
    path = Path(path)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:64]}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.chmod(tmp, file_mode(path))
        refuse_special(path, flag)  # again: something may have appeared since the check
        os.replace(tmp, path)
        tmp = None
    except OSError as err:
        raise PlannerInputError(f"{flag} {show(path)}: cannot write ({err.strerror or err})") from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return path


def write_files_atomically(files: dict, flag: str) -> list[Path]:
    """Several files (path -> (text, mode)) written together: each to a temporary sibling (its
    folder created), then all renamed into place; on any error (Ctrl-C included) the temporaries
    are removed and existing files are untouched. Special files at a path are refused."""
    temps: list[tuple[Path, Path]] = []
    try:
        for path, (text, mode) in files.items():
            path = Path(path)
            refuse_special(path, flag)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:64]}.", suffix=".tmp", dir=path.parent)
            temps.append((Path(tmp), path))
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, mode)
        for _, path in temps:
            refuse_special(path, flag)
        for tmp, path in temps:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in temps:
            tmp.unlink(missing_ok=True)
        raise
    return [path for _, path in temps]


def file_mode(path: Path) -> int:
    """The mode a plain open() would give (the old file's, when replacing one): mkstemp's 0600 is
    too tight for a table or a picture."""
    if path.exists():
        return path.stat().st_mode & 0o777
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask
