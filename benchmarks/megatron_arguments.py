"""Regenerate planner/frameworks/megatron_arguments.txt from a Megatron-LM checkout.

    git -C Megatron-LM archive COMMIT megatron | tar -x -C /tmp/mlm
    python3.12 benchmarks/megatron_arguments.py /tmp/mlm COMMIT > /tmp/args.txt
    mv /tmp/args.txt planner/frameworks/megatron_arguments.txt   # then set MEGATRON_COMMIT

Megatron-LM builds most of its parser from config dataclasses since early 2026
(megatron/training/argument_utils.py ArgumentGroupFactory: one flag per TransformerConfig,
TrainingConfig, ... field), so reading the add_argument calls of arguments.py no longer finds every
flag. This script builds the real parser instead: it imports megatron.training.arguments and calls
add_megatron_arguments (the function parse_args uses), with every package Megatron imports but the
parser does not need (torch, transformer_engine, ...) replaced by an inert stand-in, and lists
argparse's own actions: every option string, how it takes values, and the _add_*_args function that
added it. It needs Python >= 3.12 (Megatron-LM uses typing.override) with numpy and packaging.

Flags of the previous list (read from the committed file, or --previous FILE) that the new parser
no longer has are kept at the end, marked ``removed``: the reader still parses old launch scripts
that use them, the exporter never writes them.
"""

from __future__ import annotations

import abc
import argparse
import importlib.abc
import importlib.machinery
import importlib.metadata
import sys
import types
import typing
from pathlib import Path

LIST = Path(__file__).resolve().parents[1] / "planner" / "frameworks" / "megatron_arguments.txt"
REAL_PACKAGES = {"megatron", "numpy", "packaging", "typing_extensions"}
"""Imported for real; every other non-stdlib package (and megatron.rl, RL runtime only) is a stand-in."""


class _StandInMeta(typing._ProtocolMeta):  # an ABCMeta: classes built on a stand-in mix with ABC and Protocol
    def __getattr__(cls, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return StandIn(name)


class _StandInBase(metaclass=_StandInMeta):
    def __init__(self, *args, **kwargs):
        pass

    def __init_subclass__(cls, **kwargs):
        pass

    def __class_getitem__(cls, item):
        return cls


class StandIn:
    """Any attribute, call, subscript or base class of a stand-in package: another stand-in."""

    def __init__(self, name: str = "stand-in"):
        self._name = name

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return StandIn(name)

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator: keep the function
        return StandIn()

    def __mro_entries__(self, bases):
        return (_StandInBase,)

    def __getitem__(self, item):
        return self

    def __or__(self, other):
        return self

    __ror__ = __or__

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False

    def __lt__(self, other):
        return False

    __le__ = __gt__ = __ge__ = __lt__

    def __len__(self):
        return 0

    def __int__(self):
        return 0

    __index__ = __int__

    def __float__(self):
        return 0.0

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return other is self

    def __repr__(self):
        return f"<stand-in {self._name}>"


class _StandInModule(types.ModuleType):
    __version__ = "99.0.0"  # the newest: no version-gated flag is left out

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return StandIn(name)


class _StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if name == "megatron.rl" or name.startswith("megatron.rl."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        if top in REAL_PACKAGES or top in sys.stdlib_module_names:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        module = _StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def _versions_of_stand_ins() -> None:
    real = importlib.metadata.version

    def version(name):
        try:
            return real(name)
        except importlib.metadata.PackageNotFoundError:
            return "99.0.0"

    importlib.metadata.version = version


def parser_flags(root: str) -> list[tuple[str, str, str]]:
    """(flag, switch | value | list, _add_*_args function, choices) for every option string of the parser."""
    sys.path.insert(0, root)
    sys.meta_path.insert(0, _StandIns())
    _versions_of_stand_ins()
    import megatron.training.arguments as arguments

    added_by = {}

    def recording(name, add):
        def add_and_record(parser, *args, **kwargs):
            before = len(parser._actions)
            out = add(parser, *args, **kwargs)
            for action in parser._actions[before:]:
                added_by.setdefault(id(action), name)
            return out
        return add_and_record

    for name in dir(arguments):
        if name.startswith("_add_") and callable(getattr(arguments, name)):
            setattr(arguments, name, recording(name, getattr(arguments, name)))
    parser = argparse.ArgumentParser(allow_abbrev=False)
    if hasattr(arguments, "add_megatron_arguments"):
        arguments.add_megatron_arguments(parser)
    else:  # before core_r0.9: parse_args itself calls the _add_*_args functions, in this order
        for name in _groups_of_parse_args(arguments):
            parser = getattr(arguments, name)(parser)
    rows = []
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        if action.nargs == 0:  # store_true / store_false / store_const / BooleanOptionalAction
            kind = "switch"
        elif action.nargs in ("*", "+") or (isinstance(action.nargs, int) and action.nargs > 1):
            kind = "list"
        else:
            kind = "value"
        rows += [(option, kind, added_by.get(id(action), "?"), _choices(action)) for option in action.option_strings]
    return sorted(rows)


def _groups_of_parse_args(arguments) -> list[str]:
    """The ``parser = _add_*_args(parser)`` calls of an older parse_args, in order (the extra-args
    provider and everything after it left out)."""
    import inspect
    import re

    source = inspect.getsource(arguments.parse_args).split("extra_args_provider(parser)")[0]
    return re.findall(r"parser = (_add_\w+)\(parser\)", source)


def _choices(action) -> str:
    """``choices=a,b,c`` as the command line spells them (an enum choice by its name, as
    ArgumentGroupFactory's enum type reads it), or "" without choices."""
    if not action.choices:
        return ""
    words = [getattr(c, "name", c) for c in action.choices if c is not None]
    return "choices=" + ",".join(str(w) for w in words)


def previous_flags(path: Path) -> list[tuple[str, str, str, str]]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("--"):
            words = line.split()
            choices = next((w for w in words[3:] if w.startswith("choices=")), "")
            out.append((*words[:3], choices))
    return out


RELEASE_HEADER = """\
# Every command-line flag of Megatron-LM pretrain_gpt.py at release {release}, as argparse declares it in
#   NVIDIA/Megatron-LM megatron/training/arguments.py at tag {release} (commit {commit})
#   (planner.frameworks.megatron.RELEASE_ARGUMENTS: the exporter checks every flag it writes for a plan
#   priced with a --framework release of this Megatron-Core against this list), listed from the parser
#   its parse_args builds (benchmarks/megatron_arguments.py --release): the flag, how it takes values,
#   the arguments.py function that adds it, then its choices where argparse has them (as in
#   megatron_arguments.txt)."""

HEADER = """\
# Every command-line flag of Megatron-LM pretrain_gpt.py, as argparse declares it in
#   NVIDIA/Megatron-LM megatron/training/arguments.py at commit {commit}
#   (planner.frameworks.megatron.MEGATRON_COMMIT: the exporter checks every flag it writes against this list),
# listed from the parser add_megatron_arguments builds, its add_argument calls and the flags
# ArgumentGroupFactory makes from config dataclass fields (benchmarks/megatron_arguments.py): the flag,
# how it takes values, the arguments.py function that adds it, then its choices where argparse has them:
#   switch  store_true / store_false / store_const / BooleanOptionalAction: no value
#   value   one value
#   list    nargs '*' or '+': the words up to the next flag
#   choices=a,b,c  the values argparse accepts (an enum's by name); the exporter checks what it writes
# A last word, removed, marks a flag of an earlier pinned commit (first pinned: 000c4ac24f61) that this
# commit no longer has: the reader still parses old scripts with it, the exporter never writes it.
# planner.launch.megatron reads a launch script with this list: a flag in it that the reader does not
# map is known to Megatron-LM (listed as not priced or not expressible), a flag outside it is unknown
# (listed by name: a typo, or a newer Megatron-LM)."""


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", help="a Megatron-LM source tree (holding megatron/)")
    ap.add_argument("commit", help="the commit the tree is (40 hex digits)")
    ap.add_argument("--previous", type=Path, default=LIST, help="the list this one replaces")
    ap.add_argument("--release", default="", help="a release tag (e.g. core_v0.13.0): list that release's "
                    "flags alone, for megatron_arguments_<release>.txt (no removed flags)")
    args = ap.parse_args(argv)
    if args.release:
        print(RELEASE_HEADER.format(release=args.release, commit=args.commit))
        for flag, kind, group, choices in parser_flags(args.root):
            print(f"{flag:<52} {kind:<7} {group:<30} {choices}".rstrip())
        return
    old = previous_flags(args.previous) if args.previous.exists() else []
    rows = parser_flags(args.root)
    now = {row[0] for row in rows}
    removed = sorted({row for row in old if row[0] not in now})
    print(HEADER.format(commit=args.commit))
    for flag, kind, group, choices in rows:
        print(f"{flag:<52} {kind:<7} {group:<30} {choices}".rstrip())
    for flag, kind, group, choices in removed:
        print(f"{flag:<52} {kind:<7} {group:<30} {choices + ' ' if choices else ''}removed")


if __name__ == "__main__":
    main(sys.argv[1:])
