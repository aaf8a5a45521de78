"""Files planner writes: one overwrite rule and one way to write them.

The rule, for every file a command writes (``search --csv/--export/--plot``, ``export --out``,
``evaluate/validate/comm --plot``, ``sweep --csv/--plot``): an existing file is replaced only
with ``--force``, and every output is checked before any work is done (its directory exists and
takes a new file, it is not a directory), so a refused output costs nothing and a search never
runs for results it cannot write. Files are written to a temporary sibling and renamed into
place: a failure never leaves half a file.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable, Iterable, Optional

from hardware_catalog.errors import PlannerInputError


def _probe(directory: Path, flag: str, path: Path) -> None:
    """Create and remove a temporary file in ``directory``: a read-only or immutable directory,
    a read-only file system or /proc refuse here, before any work."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".planner-probe-", dir=directory)
        os.close(fd)
        os.unlink(tmp)
    except OSError as err:
        raise PlannerInputError(f"{flag} {path}: cannot write in {directory} ({err.strerror or err})") from None


def _existing_ancestor(path: Path) -> Path:
    for parent in [path, *path.parents]:
        if parent.exists():
            return parent
    return Path(".")


def check_output_file(path, flag: str, force: bool) -> Optional[Path]:
    """``path`` (None: no file asked for) if it may be written now, else ``PlannerInputError``
    naming ``flag``: it exists and ``force`` is off, it is a directory, or its directory is
    missing or refuses new files."""
    if path is None:
        return None
    path = Path(path)
    if path.is_dir():
        raise PlannerInputError(f"{flag} {path}: is a directory; give a file name")
    parent = path.parent
    if not parent.is_dir():
        raise PlannerInputError(f"{flag} {path}: directory {parent} does not exist")
    if path.exists() and not force:
        raise PlannerInputError(f"{flag} {path} already exists: pass --force to overwrite it")
    _probe(parent, flag, path)
    return path


def check_output_dir(path, flag: str, force: bool, names: Iterable[str] = ()) -> Optional[Path]:
    """A directory to write ``names`` into (created when written): it is a directory or does not
    exist yet, its nearest existing ancestor takes new files, and none of ``names`` exists in it
    unless ``force``."""
    if path is None:
        return None
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise PlannerInputError(f"{flag} {path}: exists and is not a directory")
    base = _existing_ancestor(path)
    if not base.is_dir():
        raise PlannerInputError(f"{flag} {path}: {base} is not a directory")
    _probe(base, flag, path)
    if not force:
        existing = [name for name in names if (path / name).exists()]
        if existing:
            raise PlannerInputError(f"{flag} {path}: {existing[0]} already exists there: pass --force to overwrite")
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
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.chmod(tmp, file_mode(path))
        os.replace(tmp, path)
        tmp = None
    except OSError as err:
        raise PlannerInputError(f"{flag} {path}: cannot write ({err.strerror or err})") from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return path


def file_mode(path: Path) -> int:
    """The mode a plain open() would give (the old file's, when replacing one): mkstemp's 0600 is
    too tight for a table or a picture."""
    if path.exists():
        return path.stat().st_mode & 0o777
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask
