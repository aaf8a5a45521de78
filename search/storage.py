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
    """The file a journal or SQLite ``url`` names (None for a database server or SQLite in memory)."""
    kind, where = storage_kind(url)
    if kind == "journal":
        return where
    if where.startswith("sqlite:///") and where[len("sqlite:///"):] not in ("", ":memory:"):
        return where[len("sqlite:///"):].split("?", 1)[0]
    return None


def open_storage(url: str, stale_callback: Optional[Callable] = None, must_exist: bool = False):
    """An Optuna storage for ``url`` (see the module doc). RDB storages get the heartbeat, and
    ``stale_callback(study, frozen_trial)`` for each trial failed as stale. ``must_exist``: a
    journal or SQLite file that is not there is an error (nothing is created)."""
    kind, where = storage_kind(url)
    path = local_file(url)
    if must_exist and path is not None and not os.path.isfile(path):
        raise PlannerInputError(f"--storage {_shown(url)}: no such file {redact(path)} (nothing was created)")
    if kind == "journal":
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        directory = os.path.dirname(where)
        if not os.path.isdir(directory):
            raise PlannerInputError(f"--storage {_shown(url)}: directory {directory} does not exist")
        try:
            return JournalStorage(JournalFileBackend(where))
        except OSError as err:
            raise PlannerInputError(f"--storage {_shown(url)}: cannot open the journal file ({err.strerror})") from None
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


def join_study(storage, study_name: str, kind: str, fingerprint: dict, sampler=None,
               directions: Optional[list] = None, url: Optional[str] = None):
    """Create or load the study ``study_name`` and check that it holds the same problem.

    ``fingerprint`` (a JSON-able dict) is stored as the study user attribute ``kind`` by the
    first process; a later process with a different one gets one PlannerInputError line.
    """
    import optuna

    if not study_name or len(study_name) > 512:
        raise PlannerInputError(f"--study-name {study_name!r}: give a name of 1 to 512 characters")
    with creation_lock(url):  # one creator at a time on a SQLite or journal file (the fingerprint too)
        try:
            study = _create_study(optuna, storage, study_name, sampler, directions)
        except ValueError as err:  # e.g. an existing study with other directions
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
