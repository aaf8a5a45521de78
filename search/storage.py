"""Shared Optuna storages: the ``--storage URL`` of ``planner sweep`` and ``planner search --method optuna``.

Any number of processes, on any number of machines, that open the same storage and study name
work on one study (Optuna's own distributed mode: "Easy Parallelization",
https://optuna.readthedocs.io/en/stable/tutorial/10_key_features/004_distributed.html).
Accepted forms (``STORAGE_FORMS``):

* ``journal:///abs/path/sweep.log``, or any path ending in ``.log``: a journal file
  (``optuna.storages.JournalStorage(JournalFileBackend(path))``), for processes on one machine
  (or on a file system with working ``link``/``open(O_EXCL)`` locks). It has no heartbeat: a
  trial whose worker died stays RUNNING (see ``planner sweep --reclaim-running``).
  https://optuna.readthedocs.io/en/stable/reference/generated/optuna.storages.journal.JournalFileBackend.html
* ``sqlite:///abs/path/sweep.db``, or any path ending in ``.db``/``.sqlite``/``.sqlite3``: SQLite
  through SQLAlchemy (one machine; fine for a handful of processes).
* ``postgresql://user:pass@host:5432/db`` (``postgresql+psycopg2://...``), ``mysql+pymysql://...``:
  a database server, for workers on many machines. Needs a driver the project does not depend on:
  ``pip install psycopg2-binary`` (PostgreSQL) or ``pip install pymysql`` (MySQL).

RDB storages (SQLite, PostgreSQL, MySQL) get Optuna's heartbeat: each running trial records a
heartbeat every ``HEARTBEAT_INTERVAL_S``; a trial with none for ``GRACE_PERIOD_S`` is failed by the
next worker that starts a trial (``optuna.storages.fail_stale_trials``), which then calls the
``heartbeat_stale_trial_callback`` given here (the sweep uses it to queue that scenario again).
https://optuna.readthedocs.io/en/stable/reference/generated/optuna.storages.RDBStorage.html
https://optuna.readthedocs.io/en/stable/reference/generated/optuna.storages.RetryFailedTrialCallback.html
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import time
import warnings
from typing import Callable, Optional

from hardware_catalog.errors import PlannerInputError

HEARTBEAT_INTERVAL_S = 5
"""Seconds between the heartbeats a running trial records (RDB storages)."""
GRACE_PERIOD_S = 30
"""A RUNNING trial with no heartbeat for this long is failed as stale (its worker died)."""
STORAGE_FORMS = ("journal:///PATH.log (or PATH.log): journal file, one machine; "
                 "sqlite:///PATH.db (or PATH.db): SQLite, one machine; "
                 "postgresql://USER:PASS@HOST:PORT/DB or mysql+pymysql://...: a server, many machines "
                 "(pip install psycopg2-binary / pymysql)")
OPEN_ATTEMPTS = 5
"""Tries to open an RDB storage whose tables other workers are creating at the same moment."""
RDB_PREFIXES = ("sqlite:", "postgresql:", "postgresql+", "postgres:", "mysql:", "mysql+")


def redact(url) -> str:
    """``url`` as it may be shown: a password in it (``postgresql://user:PASS@host/db``) becomes
    ``***``; long values are cut short."""
    from hardware_catalog.files import show

    text = re.sub(r"(://[^/:@\s]*:)[^@/\s]*@", r"\1***@", str(url or ""))
    text = re.sub(r"((?:password|passwd|pwd)=)[^&;\s]*", r"\1***", text, flags=re.I)  # ?password= query forms
    return show(text)


def _shown(url) -> str:
    return repr(redact(url))


def storage_kind(url: str) -> tuple[str, str]:
    """("journal" | "rdb", path-or-url) for a ``--storage`` value; PlannerInputError if not understood."""
    text = (url or "").strip()
    if text.startswith("journal://"):
        path = text[len("journal://"):]
        if not path:
            raise PlannerInputError(f"--storage {_shown(url)}: journal:// needs a file path (journal:///tmp/sweep.log)")
        return "journal", os.path.abspath(os.path.expanduser(path))
    if text.startswith("postgres://"):  # SQLAlchemy 2 knows only the postgresql:// spelling
        text = "postgresql://" + text[len("postgres://"):]
    if text.startswith(RDB_PREFIXES):
        return "rdb", text
    if "://" not in text and text:
        lower = text.lower()
        if lower.endswith(".log"):
            return "journal", os.path.abspath(os.path.expanduser(text))
        if lower.endswith((".db", ".sqlite", ".sqlite3")):
            return "rdb", "sqlite:///" + os.path.abspath(os.path.expanduser(text))
    raise PlannerInputError(f"--storage {_shown(url)} is not understood (allowed: {STORAGE_FORMS})")


def local_file(url: str) -> Optional[str]:
    """The file a journal or SQLite ``url`` names (None for a database server or SQLite in memory).
    A SQLite URI filename (``sqlite:///file:/abs/x.db?mode=ro&uri=true``) names the file after ``file:``."""
    kind, where = storage_kind(url)
    if kind == "journal":
        return where
    if not where.startswith("sqlite:///"):
        return None
    path, _, query = where[len("sqlite:///"):].partition("?")
    if "uri=true" in query.lower() and path.startswith("file:"):
        if "mode=memory" in query.lower():
            return None
        path = path[len("file:"):]
        if path.startswith("//"):  # file://HOST/PATH: the host is empty or localhost
            path = path[2:]
            path = path[path.index("/"):] if "/" in path else ""
    return None if path in ("", ":memory:") else path


def _read_only_url(url: str) -> bool:
    """A SQLite URI opened read-only (``?mode=ro&uri=true``)."""
    query = storage_kind(url)[1].partition("?")[2].lower()
    return "uri=true" in query and "mode=ro" in query.split("&")


SQLITE_HEADER = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file (https://www.sqlite.org/fileformat.html)."""
JOURNAL_START = b'{"op_code"'
"""How every record Optuna's ``JournalStorage`` writes starts: ``{"op_code": N, "worker_id": ...}``,
one JSON object a line (``json.dumps``; optuna 3.1 to 5 alike, with or without spaces after it)."""
OPTUNA_TABLES = ("studies", "trials", "version_info", "alembic_version", "study_directions")
"""Tables of an Optuna SQLite storage (``optuna.storages._rdb.models``); a database with tables but
none of these belongs to something else."""


def _where(url: str, path: str) -> str:
    """``--storage 'VALUE'``, with the file it names when the value does not show it as it is."""
    shown = _shown(url)
    return f"--storage {shown}" if str(url).strip() == path else f"--storage {shown} ({redact(path)})"


def _journal_record(line: bytes) -> bool:
    """``line`` (one whole line) is one record of an Optuna journal: a JSON object with "op_code"."""
    try:
        record = json.loads(line)
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        return False
    return isinstance(record, dict) and "op_code" in record


def _partial_record(tail: bytes) -> bool:
    """``tail`` (what follows the last newline) may be a record another process is writing now:
    a prefix of one (Optuna writes each batch of records with one ``write``)."""
    return tail.startswith(JOURNAL_START) or JOURNAL_START.startswith(tail)


def _last_line(fh, size: int) -> tuple[bytes, bytes, int]:
    """(the last whole line, what follows it, the offset where that line starts) of the open
    binary file ``fh`` of ``size`` bytes, read from its end."""
    buf, pos = b"", size
    while pos > 0:
        n = min(1 << 16, pos)
        pos -= n
        fh.seek(pos)
        buf = fh.read(n) + buf
        end = buf.rfind(b"\n")
        if end != -1 and (buf.rfind(b"\n", 0, end) != -1 or pos == 0):
            break
    end = buf.rfind(b"\n")
    if end == -1:
        return b"", buf, pos
    start = buf.rfind(b"\n", 0, end) + 1
    return buf[start:end + 1], buf[end + 1:], pos + start


def _line_number(fh, offset: int) -> int:
    """The 1-based number of the line that starts at ``offset`` (read only to say where a problem is)."""
    fh.seek(0)
    count, left = 0, offset
    while left > 0:
        chunk = fh.read(min(1 << 20, left))
        if not chunk:
            break
        count += chunk.count(b"\n")
        left -= len(chunk)
    return count + 1


CUT_SHORT_WAIT_S = 2.0
"""How long a journal whose last line is cut short is read again, for the worker writing that
line (under Optuna's lock, one ``write``) to finish it, before the line is taken as a write that
never finished (a crash, a full disk): Optuna would write its next record onto it."""


def journal_problem(path: str, every_line: bool = False) -> Optional[str]:
    """Why the existing file ``path`` is not an Optuna journal (None: it reads as one). A journal
    is empty or lines of JSON objects with "op_code", each ended by a newline
    (``optuna.storages.journal.JournalFileBackend``; a last line cut short is one another worker
    is writing, read again until it ends, for ``CUT_SHORT_WAIT_S``). Checked: the first line, the
    last whole line and what follows it: Optuna reads every line as it opens the file and fails
    on a bad one before it writes anything (``every_line`` then finds which), but the last whole
    line it reads without complaint, writes after, and only then fails on."""
    deadline = time.monotonic() + CUT_SHORT_WAIT_S
    while True:
        problem, cut = _journal_lines(path, every_line)
        if cut is None:
            return problem
        if time.monotonic() > deadline:
            return f"line {cut} is cut short: a write that never finished"
        time.sleep(0.05)


def _journal_lines(path: str, every_line: bool) -> tuple[Optional[str], Optional[int]]:
    """(why ``path`` is not a journal or None, the number of its last line when that line is the
    start of a record cut short, else None)."""
    bad = 'line {} is not a JSON object with "op_code"'
    size = os.path.getsize(path)
    if size == 0:
        return None, None
    with open(path, "rb") as fh:
        first = fh.readline(1 << 20)
        if first.startswith(SQLITE_HEADER):
            return "it is a SQLite database: give it as sqlite:///PATH", None
        if not first.endswith(b"\n"):  # one line, not ended: a record being written, or not a journal
            return (None, 1) if len(first) == size and _partial_record(first) else (bad.format(1), None)
        if not _journal_record(first):
            return bad.format(1), None
        if every_line:
            fh.seek(0)
            for number, line in enumerate(fh, start=1):
                if not line.endswith(b"\n"):
                    return (None, number) if _partial_record(line) else (bad.format(number), None)
                if not _journal_record(line):
                    return bad.format(number), None
            return None, None
        last, tail, start = _last_line(fh, size)
        if not _journal_record(last):
            return bad.format(_line_number(fh, start)), None
        if tail:
            number = _line_number(fh, start) + 1
            return (None, number) if _partial_record(tail) else (bad.format(number), None)
    return None, None


def sqlite_problem(path: str) -> Optional[str]:
    """Why the existing file ``path`` is not a SQLite database an Optuna storage can be kept in
    (None: it can). An empty file is a new database (SQLite's own rule)."""
    size = os.path.getsize(path)
    if size == 0:
        return None
    with open(path, "rb") as fh:
        head = fh.read(len(SQLITE_HEADER))
    if head != SQLITE_HEADER:
        hint = ": it is an Optuna journal, give it as journal:///PATH" if head.startswith(JOURNAL_START) else ""
        return f"it does not start with the SQLite header \"SQLite format 3\"{hint}"
    tables = _sqlite_tables(path)
    if tables and not set(tables) & set(OPTUNA_TABLES):
        return f"its tables are another program's: {', '.join(tables[:5])}{', ...' if len(tables) > 5 else ''}"
    return None


def _sqlite_tables(path: str) -> list:
    """The tables of the SQLite file ``path``, read with ``immutable=1`` (no lock, no journal,
    nothing written); [] when they cannot be read (the open itself then says why)."""
    import sqlite3
    from urllib.parse import quote

    try:
        con = sqlite3.connect(f"file:{quote(os.path.abspath(path))}?immutable=1", uri=True, timeout=0.5)
        try:
            return sorted(r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
        finally:
            con.close()
    except sqlite3.Error:
        return []


def _why_not_writable(path: str) -> str:
    try:
        return "read-only file system" if os.statvfs(path).f_flag & os.ST_RDONLY else "permission denied"
    except OSError as err:
        return err.strerror or str(err)


def check_file(url: str, must_exist: bool = False, writable: bool = True) -> None:
    """Refuse, in one ``PlannerInputError`` line and before anything opens or writes it, a journal
    or SQLite ``url`` whose file is not what the form says: a directory or another special file,
    a folder that does not exist, an existing file that is not an Optuna journal (``.log``,
    ``journal://``) or not a SQLite database (``.db``, ``sqlite://``), or (``writable``) one this
    process cannot write. ``must_exist``: a file that is not there is refused too."""
    kind, _ = storage_kind(url)
    path = local_file(url)
    if path is None:
        return
    where = _where(url, path)
    what = "journal file" if kind == "journal" else "SQLite file"
    form = "journal:///PATH.log" if kind == "journal" else "sqlite:///PATH.db"
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise PlannerInputError(f"{where} is a directory, not a {what} (give a file: {form})")
    if not os.path.isdir(directory):
        raise PlannerInputError(f"{where}: directory {redact(directory)} does not exist (nothing was created)")
    if not os.path.lexists(path):
        if must_exist:
            raise PlannerInputError(f"{where}: no such file {redact(path)} (nothing was created)")
        if writable and not os.access(directory, os.W_OK | os.X_OK):
            raise PlannerInputError(f"{where}: cannot create the {what} in {redact(directory)} "
                                    f"({_why_not_writable(directory)})")
        return
    if not os.path.isfile(path):
        raise PlannerInputError(f"{where} is not a regular file (give a {what}: {form})")
    try:
        problem = journal_problem(path) if kind == "journal" else sqlite_problem(path)
    except OSError as err:
        raise PlannerInputError(f"{where}: cannot read the {what} ({err.strerror or err})") from None
    if problem:
        raise PlannerInputError(not_this_file(url, path, kind, problem))
    if not writable:
        return
    if _read_only_url(url) or not os.access(path, os.W_OK):
        why = "opened with mode=ro" if _read_only_url(url) else _why_not_writable(path)
        blocked = f"cannot write to the {what} ({why})"
    elif not os.access(directory, os.W_OK | os.X_OK):  # the journal's lock file, SQLite's rollback journal
        blocked = f"cannot write in its folder {redact(directory)} ({_why_not_writable(directory)})"
    else:
        return
    raise PlannerInputError(f"{where}: {blocked}; the study's trials are written there "
                            f"(planner sweep --report-only only reads it)")


def not_this_file(url: str, path: str, kind: str, problem: str) -> str:
    """The one line that refuses ``path``: not an Optuna journal (or SQLite database) because of ``problem``."""
    what = "an Optuna journal file" if kind == "journal" else "an Optuna SQLite database"
    return (f"{_where(url, path)} is not {what} ({problem}); give a file a sweep or search wrote, "
            f"or a new file name (the file was left as it is)")


def open_storage(url: str, stale_callback: Optional[Callable] = None, must_exist: bool = False,
                 read_only: bool = False):
    """An Optuna storage for ``url`` (see the module doc). RDB storages get the heartbeat, and
    ``stale_callback(study, frozen_trial)`` for each trial failed as stale. A journal or SQLite
    file is checked first (``check_file``): nothing opens, creates or writes a file that is not
    what its form says. ``must_exist``: a file that is not there is an error (nothing is created);
    ``read_only``: the caller only reads, so a file it cannot write is fine."""
    kind, where = storage_kind(url)
    check_file(url, must_exist=must_exist, writable=not read_only)
    if kind == "journal":
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        try:
            return JournalStorage(JournalFileBackend(where))  # reads every record; writes nothing
        except OSError as err:
            raise PlannerInputError(f"{_where(url, where)}: cannot open the journal file ({err.strerror or err})") from None
        except Exception as err:  # a line Optuna cannot read (it fails before writing anything)
            problem = journal_problem(where, every_line=True) or f"Optuna cannot read it: {type(err).__name__}: {err}"
            raise PlannerInputError(not_this_file(url, where, kind, redact(" ".join(problem.split())[:200]))) from None
    with creation_lock(url):
        return _open_rdb(url, where, stale_callback)


@contextlib.contextmanager
def creation_lock(url: str):
    """Hold an exclusive lock on the folder of a SQLite or journal file while its tables or its
    study are created: workers starting together on a new SQLite file otherwise race in Optuna's
    schema set-up (alembic_version: IntegrityError) or in create_study. A folder lock (flock on
    the folder itself) leaves no file behind. No-op for database servers and where flock is
    missing (they serialize these steps themselves; the retries below remain)."""
    path = local_file(url) if url else None
    folder = os.path.dirname(path) if path else None
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        fcntl = None
    if folder is None or fcntl is None or not os.path.isdir(folder):
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _racing(err: Exception) -> bool:
    """An error of two workers creating the same schema or study at once (retry it)."""
    text = f"{type(err).__name__} {err}"
    return any(k in text for k in ("already exists", "IntegrityError", "UNIQUE constraint", "database is locked",
                                    "DuplicatedStudyError"))


def _open_rdb(url: str, where: str, stale_callback):
    import optuna

    try:
        for attempt in range(OPEN_ATTEMPTS):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    return optuna.storages.RDBStorage(
                        where, heartbeat_interval=HEARTBEAT_INTERVAL_S, grace_period=GRACE_PERIOD_S,
                        heartbeat_stale_trial_callback=stale_callback,
                    )
            except Exception as err:
                # Workers starting at once on an empty database race to create Optuna's tables
                # (a server has no folder lock): the losers get "already exists" or an
                # IntegrityError on alembic_version; the tables are there now, so open again.
                if not _racing(err) or attempt == OPEN_ATTEMPTS - 1:
                    raise
                time.sleep(0.2 + random.random())
    except ModuleNotFoundError as err:
        hint = {"psycopg2": "pip install psycopg2-binary", "pymysql": "pip install pymysql",
                "MySQLdb": "pip install pymysql and use mysql+pymysql://"}.get(err.name, f"pip install {err.name}")
        raise PlannerInputError(f"--storage {_shown(url)}: needs the database driver {err.name} ({hint})") from None
    except Exception as err:  # sqlalchemy errors: bad URL, server down, bad credentials
        msg = redact(" ".join(str(err).split())[:200])
        raise PlannerInputError(f"--storage {_shown(url)}: cannot open ({type(err).__name__}: {msg})") from None


def check_study_name(study_name: str) -> None:
    """A study name a storage takes: 1 to 512 characters (RDB storages' column)."""
    if not study_name or len(study_name) > 512:
        raise PlannerInputError(f"--study-name {study_name!r}: give a name of 1 to 512 characters")


def join_study(storage, study_name: str, kind: str, fingerprint: dict, sampler=None,
               directions: Optional[list] = None, url: Optional[str] = None):
    """Load the study ``study_name`` (writing nothing) or create it, and check that it holds the
    same problem.

    ``fingerprint`` (a JSON-able dict) is stored as the study user attribute ``kind`` by the
    first process; a later process with a different one gets one PlannerInputError line.
    """
    import optuna

    check_study_name(study_name)
    with creation_lock(url):  # one creator at a time on a SQLite or journal file (the fingerprint too)
        try:
            study = _load_or_create_study(optuna, storage, study_name, sampler, directions)
        except optuna.exceptions.StorageInternalError as err:  # a write refused: read-only, disk full
            raise PlannerInputError(_storage_failed(url, "cannot write to it", err)) from None
        except ValueError as err:
            if _unreadable(err):  # the storage's data, not the study name: a journal line Optuna cannot read
                raise PlannerInputError(_storage_failed(url, "cannot read it", err)) from None
            raise PlannerInputError(f"--study-name {study_name!r}: {err} (use another --study-name)") from None
        mine = json.loads(json.dumps(fingerprint))
        stored = study.user_attrs.get(kind)
        if stored is None:
            if _foreign(study, kind):
                raise PlannerInputError(f"--study-name {study_name!r} is not a planner {kind.split('_')[-1]} study "
                                        f"(it holds other trials; use another --study-name)")
            study.set_user_attr(kind, mine)
            stored = optuna.load_study(study_name=study_name, storage=storage).user_attrs.get(kind)
    if stored != mine:
        diff = sorted(k for k in set(mine) | set(stored or {}) if (stored or {}).get(k) != mine.get(k))
        raise PlannerInputError(
            f"--study-name {study_name!r} already holds a different {kind.split('_')[-1]} "
            f"(differs in: {', '.join(diff)}); give the same settings, or another --study-name")
    return study


def _unreadable(err: Exception) -> bool:
    """A ValueError of reading the storage (a journal line that is not JSON, a line cut short),
    not of the study asked for."""
    return isinstance(err, json.JSONDecodeError) or str(err) == "Invalid log format."


def _storage_failed(url: Optional[str], what: str, err: Exception) -> str:
    cause = err.__cause__ or err.__context__ or err
    text = redact(" ".join(str(getattr(cause, "orig", None) or cause).split())[:200])
    return f"--storage {_shown(url) if url else '(the study storage)'}: {what} ({type(cause).__name__}: {text})"


def _load_or_create_study(optuna, storage, study_name, sampler, directions):
    """The study ``study_name``: loaded when it exists (nothing is written: ``--report-only`` and
    read-only files work, and a journal gets no line), else created."""
    try:
        storage.get_study_id_from_name(study_name)
    except KeyError:
        return _create_study(optuna, storage, study_name, sampler, directions)
    return optuna.load_study(study_name=study_name, storage=storage, sampler=sampler)


def _create_study(optuna, storage, study_name, sampler, directions):
    """``optuna.create_study(load_if_exists=True)``, retried while another worker (on a database
    server, where no folder lock serializes the creators) is creating the same study."""
    for attempt in range(OPEN_ATTEMPTS):
        try:
            return optuna.create_study(storage=storage, study_name=study_name, sampler=sampler,
                                       directions=directions or ["minimize"], load_if_exists=True)
        except Exception as err:
            if not _racing(err) or attempt == OPEN_ATTEMPTS - 1:
                raise
            time.sleep(0.2 + random.random())


def _foreign(study, kind: str) -> bool:
    other = [k for k in study.user_attrs if k.startswith("planner_") and k != kind]
    return bool(other) or len(study.trials) > 0
