"""Read a bash launch script without running it: variables, arrays, ``if`` branches and commands.

A launch script is data here, never executed: ``read_script`` walks its statements the way bash
would for the subset launch scripts use, and returns every simple command with its words fully
expanded, plus the variables and arrays it set. What it does not evaluate it says so in
``Script.notes`` (command substitutions, loops, functions, ``source``), so a reader can list it.

Supported (bash(1), sections QUOTING, PARAMETERS, EXPANSION, "Compound Commands"):

* quoting: ``'...'``, ``"..."``, backslash escapes, ``#`` comments, line continuations;
* assignments ``NAME=word``, ``export NAME=word``, ``NAME=(words)``, ``NAME+=(words)``, ``NAME+=word``;
* parameter expansion ``$NAME``, ``${NAME}``, ``${NAME:-word}`` / ``-`` / ``:=`` / ``=`` / ``:+``,
  ``${ARR[@]}`` / ``${ARR[*]}`` / ``${ARR[i]}``, ``${#ARR[@]}``, positional parameters (unset, so
  their defaults apply; ``$0`` and ``${BASH_SOURCE[0]}`` are the script), ``$((arithmetic))``;
* word splitting of unquoted expansions (``${ARGS[@]}`` unquoted splits ``"--fp8-format hybrid"``
  into two words, as bash does);
* ``if``/``elif``/``else``/``fi`` with ``[[ ]]`` / ``[ ]`` tests (``==``, ``=``, ``!=``, ``-z``,
  ``-n``, integer comparisons, file tests taken as true, ``!``, ``&&``, ``||``);
* ``exit`` at the top level ends the walk; ``#SBATCH`` directives are collected.

``$(command)`` and backquotes expand to a placeholder (never run); ``for``/``while``/``case`` bodies
and function definitions are skipped.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field

_OPERATORS = ("&&", "||", ";;", ";", "&", "|", "(", ")", "\n")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?=)(.*)$", re.S)
MAX_EXPANDED_CHARS = 64 * 2**20
"""Text a walk may produce, all words together: a launch script expands to kilobytes; a variable
that doubles itself line after line (``A=$A$A``) would reach gigabytes in thirty lines."""
SUBSTITUTION = "<command-substitution>"
"""What ``$(...)`` and backquotes expand to: never run, never empty."""


@dataclass
class Script:
    """What walking a script found."""

    path: str
    commands: list[list[str]] = field(default_factory=list)
    """Every simple command run, its words expanded (assignment-only statements excluded)."""
    variables: dict[str, str] = field(default_factory=dict)
    arrays: dict[str, list[str]] = field(default_factory=dict)
    array_order: list[str] = field(default_factory=list)
    """Array names in the order they were last assigned."""
    sbatch: list[str] = field(default_factory=list)
    """Words of the ``#SBATCH`` directives, in order."""
    notes: list[str] = field(default_factory=list)
    """What the walk could not evaluate."""
    expanded_chars: int = 0
    """Characters produced by expansion so far (bounded by ``MAX_EXPANDED_CHARS``)."""
    exited: str = ""
    """The ``exit`` command that ended the walk ("" when the walk reached the end)."""


# ----------------------------------------------------------------------------------- tokens


@dataclass(frozen=True)
class Word:
    """One shell word as written: the raw text (quotes kept) for later expansion."""

    raw: str


def _read_quoted(text: str, i: int, quote: str) -> int:
    """Index just past the closing ``quote`` of the quoted part starting at text[i]."""
    j = i + 1
    while j < len(text):
        c = text[j]
        if quote == '"' and c == "\\":
            j += 2
            continue
        if quote == '"' and text.startswith("$(", j):
            j = _read_parens(text, j + 1)
            continue
        if c == quote:
            return j + 1
        j += 1
    return j


def _read_parens(text: str, i: int) -> int:
    """Index just past the ``)`` matching the ``(`` at text[i] (quotes respected)."""
    depth, j = 0, i
    while j < len(text):
        c = text[j]
        if c in "'\"":
            j = _read_quoted(text, j, c)
            continue
        if c == "\\":
            j += 2
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return j


def _read_braces(text: str, i: int) -> int:
    """Index just past the ``}`` closing the ``${`` whose ``{`` is at text[i]."""
    depth, j = 0, i
    while j < len(text):
        c = text[j]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return j + 1
        elif c in "'\"":
            j = _read_quoted(text, j, c)
            continue
        j += 1
    return j


def _word_end(text: str, i: int) -> int:
    """Index just past the word starting at text[i]."""
    j = i
    while j < len(text):
        c = text[j]
        if c == "(" and j > i and text[j - 1] == "=":  # NAME=( ... ): an array assignment is one word
            j = _read_parens(text, j)
            continue
        if c in " \t\n;&|<>()":
            return j
        if c == "\\":
            j += 3 if text.startswith("\\\r\n", j) else 2
        elif c in "'\"`":
            j = _read_quoted(text, j, c)
        elif text.startswith("$((", j) or text.startswith("$(", j):
            j = _read_parens(text, j + 1)
        elif text.startswith("${", j):
            j = _read_braces(text, j + 1)
        else:
            j += 1
    return j


def tokenize(text: str) -> list:
    """Words and operators (``Word`` / str); comments and line continuations removed. A
    backslash-newline joins lines outside comments only: a comment runs to its line's end, a
    backslash in it is literal (bash(1) QUOTING and COMMENTS)."""
    out: list = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and text.startswith(("\\\n", "\\\r\n"), i):
            i += 2 if text[i + 1] == "\n" else 3
        elif c in " \t\r":
            i += 1
        elif c == "#" and (i == 0 or text[i - 1] in " \t\n;&|()"):
            while i < len(text) and text[i] != "\n":
                i += 1
        elif c in "<>":
            i = _skip_redirection(text, i)
        else:
            op = next((o for o in _OPERATORS if text.startswith(o, i)), None)
            if op is not None:
                out.append(op)
                i += len(op)
                continue
            j = _word_end(text, i)
            if j == i:  # a lone character no rule consumed
                j = i + 1
            if text[i:j].isdigit() and text.startswith(("<", ">"), j):  # 2>&1: a file descriptor
                i = j
                continue
            out.append(Word(text[i:j].replace("\\\r\n", "").replace("\\\n", "")))
            i = j
    return out


def _skip_redirection(text: str, i: int) -> int:
    """Skip ``>file``, ``2>&1``, ``<<<word``, ``<<EOF ... EOF`` (the here-document too)."""
    j = i
    while j < len(text) and text[j] in "<>&":
        j += 1
    heredoc = text.startswith("<<", i) and not text.startswith("<<<", i)
    while j < len(text) and text[j] in " \t":
        j += 1
    k = _word_end(text, j)
    target = text[j:k].strip("'\"-")
    if heredoc and target:
        end = re.search(rf"^\s*{re.escape(target)}\s*$", text[k:], re.M)
        return k + end.end() if end else len(text)
    return k


# ----------------------------------------------------------------------------------- expansion


class _Expander:
    """Parameter, arithmetic and command-substitution expansion against a ``Script``'s state."""

    def __init__(self, script: Script):
        self.s = script

    def value(self, name: str) -> str | None:
        if name in ("0", "BASH_SOURCE"):
            return self.s.path
        if name.isdigit() or name in ("@", "*", "#"):
            return None if name != "#" else "0"
        if name in self.s.arrays:
            arr = self.s.arrays[name]
            return arr[0] if arr else ""
        return self.s.variables.get(name)

    def braced(self, inner: str) -> list[str] | str:
        """``${inner}`` -> a string, or a list of fields for ``ARR[@]``."""
        m = re.fullmatch(r"#([A-Za-z_][A-Za-z0-9_]*)\[[@*]\]", inner)
        if m:
            return str(len(self.s.arrays.get(m.group(1), [])))
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\[([@*]|\d+)\]", inner)
        if m:
            name, index = m.groups()
            if name == "BASH_SOURCE":
                return self.s.path
            arr = self.s.arrays.get(name, [self.s.variables[name]] if name in self.s.variables else [])
            if index in "@*":
                return list(arr)
            k = int(index)
            return arr[k] if k < len(arr) else ""
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*|\d+|[@*#])(:?[-=+?])?(.*)", inner, re.S)
        if not m:
            self.s.notes.append(f"${{{inner}}} not expanded (only ${{NAME}}, ${{NAME:-default}} and arrays are)")
            return ""
        name, op, word = m.groups()
        current = self.value(name)
        if not op:
            return current or ""
        unset = current is None or (op.startswith(":") and current == "")
        if op.endswith("+"):
            return "" if unset else self.text(word)
        if not unset:
            return current
        default = self.text(word)
        if op.endswith("=") and _NAME.fullmatch(name):
            self.s.variables[name] = default
        return default

    def arithmetic(self, expr: str) -> str:
        """``$((expr))`` by ``planner.launch.arith`` (64-bit integers, bounded work); a value
        beyond 64 bits or a division by zero is a one-line error, syntax outside the subset a
        note (and 0, bash's value of an unset name)."""
        from hardware_catalog.errors import PlannerInputError
        from hardware_catalog.files import show
        from planner.launch.arith import ArithmeticLimit, evaluate

        def lookup(m) -> str:
            value = self.value(m.group(1) or m.group(2))
            return f"({value})" if value not in (None, "") else "0"

        expanded = re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?|(?<![0-9A-Za-z_#])([A-Za-z_][A-Za-z0-9_]*)", lookup, expr)
        try:
            return str(evaluate(expanded))
        except ArithmeticLimit as err:
            raise PlannerInputError(f"{show(self.s.path)}: $(({show(expr)})): {err} (bash would wrap around; "
                                    f"a launch value is a small integer)") from None
        except ValueError:
            self.s.notes.append(f"$(({expr})) not evaluated")
            return "0"

    def text(self, raw: str) -> str:
        """Expand ``raw`` to one string (no splitting), e.g. a default value or a quoted part."""
        return " ".join(self.fields(raw, split=False))

    def fields(self, raw: str, split: bool = True) -> list[str]:
        """Expand one word to its fields (bash: expansion, then splitting of unquoted results,
        then quote removal). ``split=False``: as inside double quotes."""
        out = _Fields(self.s)
        i = 0
        while i < len(raw):
            c = raw[i]
            if c == "'":
                j = _read_quoted(raw, i, "'")
                out.add(raw[i + 1:j - 1], quoted=True)
                i = j
            elif c == '"':
                j = _read_quoted(raw, i, '"')
                self._double_quoted(raw[i + 1:j - 1], out)
                i = j
            elif c == "\\" and i + 1 < len(raw):
                out.add(raw[i + 1], quoted=True)
                i += 2
            elif c == "$" or c == "`":
                i = self._dollar(raw, i, out, split=split)
            else:
                out.add(c, quoted=True)
                i += 1
        return out.result()

    def _double_quoted(self, body: str, out: "_Fields") -> None:
        whole = re.fullmatch(r"\$@|\$\{@\}|\$\{([A-Za-z_][A-Za-z0-9_]*)\[@\]\}", body)
        if whole and (whole.group(1) is None or not self.s.arrays.get(whole.group(1))):
            if whole.group(1) is None or whole.group(1) not in self.s.variables:
                return  # "$@" / "${ARR[@]}" with nothing in it: no word at all (bash)
        i = 0
        out.add("", quoted=True)
        while i < len(body):
            c = body[i]
            if c == "\\" and i + 1 < len(body) and body[i + 1] in '$`"\\':
                out.add(body[i + 1], quoted=True)
                i += 2
            elif c in "$`":
                i = self._dollar(body, i, out, split=False)
            else:
                out.add(c, quoted=True)
                i += 1

    def _dollar(self, raw: str, i: int, out: "_Fields", split: bool) -> int:
        """Expand the ``$...`` (or backquote) at raw[i] into ``out``; returns the index after it."""
        if raw[i] == "`":
            j = _read_quoted(raw, i, "`")
            self.s.notes.append(f"command substitution {raw[i:j]} not run")
            out.add(SUBSTITUTION, quoted=True)
            return j
        if raw.startswith("$((", i):
            j = _read_parens(raw, i + 1)
            out.add(self.arithmetic(raw[i + 3:j - 2]), quoted=True)
            return j
        if raw.startswith("$(", i):
            j = _read_parens(raw, i + 1)
            self.s.notes.append(f"command substitution {raw[i:j]} not run")
            out.add(SUBSTITUTION, quoted=True)
            return j
        if raw.startswith("${", i):
            j = _read_braces(raw, i + 1)
            value = self.braced(raw[i + 2:j - 1])
        else:
            m = re.match(r"[A-Za-z_][A-Za-z0-9_]*|\d|[@*#?$!]", raw[i + 1:])
            if not m:
                out.add("$", quoted=True)
                return i + 1
            j = i + 1 + m.end()
            name = m.group(0)
            value = [] if name in "@*" else (self.value(name) or "")
        out.expansion(value, split)
        return j


class _Fields:
    """Fields being built for one word (a quoted empty string still makes a field). The field
    being built is a list of pieces (joined once: a long word costs linear time)."""

    def __init__(self, script: Script):
        self.script = script
        self.fields: list[str] = []
        self.current: list[str] | None = None

    def _spend(self, n: int) -> None:
        self.script.expanded_chars += n
        if self.script.expanded_chars > MAX_EXPANDED_CHARS:
            from hardware_catalog.errors import PlannerInputError
            from hardware_catalog.files import show

            raise PlannerInputError(f"{show(self.script.path)}: expands to more than {MAX_EXPANDED_CHARS:,} characters "
                                    f"(a variable that doubles itself?); a launch script expands to kilobytes")

    def add(self, text: str, quoted: bool) -> None:
        self._spend(len(text))
        if self.current is None:
            self.current = []
        self.current.append(text)

    def _close(self) -> None:
        self.fields.append("".join(self.current))
        self.current = None

    def expansion(self, value, split: bool) -> None:
        if isinstance(value, list):  # "${ARR[@]}": one field per element
            if not value:
                return
            if not split:
                self.add(value[0], quoted=True)
                for v in value[1:]:
                    self._close()
                    self.add(v, quoted=True)
                return
            value = " ".join(value)
        if not split:
            self.add(value, quoted=True)
            return
        parts = value.split()
        if not parts:
            return
        if value[:1].isspace() and self.current is not None:
            self._close()
        self.add(parts[0], quoted=False)
        for part in parts[1:]:
            self._close()
            self.add(part, quoted=False)
        if value[-1:].isspace():
            self._close()

    def result(self) -> list[str]:
        return self.fields + (["".join(self.current)] if self.current is not None else [])


# ----------------------------------------------------------------------------------- statements

_SKIP_BLOCKS = {"for": "done", "while": "done", "until": "done", "select": "done"}
_KEYWORDS = {"then", "elif", "else", "fi", "do", "done", "esac", "}"}


@dataclass
class _Command:
    words: list  # Word items
    link: str = ""  # "&&" / "||" joining it to the previous command ("" = a new statement)


@dataclass
class _If:
    branches: list  # [(condition statements, body statements)]
    orelse: list


@dataclass
class _Case:
    subject: "Word"
    clauses: list  # [(pattern Words, body statements)]


@dataclass
class _Skipped:
    what: str


class _Parser:
    """Tokens -> statements (commands, ``if`` blocks, skipped compound commands)."""

    def __init__(self, tokens: list):
        self.t = tokens
        self.i = 0

    def peek(self):
        return self.t[self.i] if self.i < len(self.t) else None

    def at_keyword(self, *names) -> bool:
        tok = self.peek()
        return isinstance(tok, Word) and tok.raw in names

    def statements(self, stop=()) -> list:
        out: list = []
        link = ""
        while self.i < len(self.t):
            tok = self.peek()
            if isinstance(tok, str):
                if tok in stop:
                    break
                self.i += 1
                link = tok if tok in ("&&", "||") else ""
                continue
            if tok.raw in stop:
                break
            if tok.raw in _KEYWORDS:  # stray keyword: a block we do not model; skip it
                self.i += 1
                continue
            out.append(self.statement(link))
            link = ""
        return out

    def statement(self, link: str):
        tok = self.peek()
        if tok.raw == "if":
            return self.if_block()
        if tok.raw == "case" and isinstance(self.t[self.i + 1] if self.i + 1 < len(self.t) else None, Word):
            return self.case_block()
        if tok.raw in _SKIP_BLOCKS:
            self.skip_until(_SKIP_BLOCKS[tok.raw], tok.raw)
            return _Skipped(f"'{tok.raw}' block")
        if tok.raw == "function" or (self.i + 2 < len(self.t) and self.t[self.i + 1] == "(" and self.t[self.i + 2] == ")"):
            self.skip_function()
            return _Skipped(f"function {tok.raw if tok.raw != 'function' else ''}".strip())
        words = []
        while self.i < len(self.t) and isinstance(self.peek(), Word):
            words.append(self.t[self.i])
            self.i += 1
        return _Command(words, link)

    def if_block(self) -> _If:
        branches, orelse = [], []
        self.i += 1  # "if"
        while True:
            cond = self.statements(stop=("then",))
            self.i += 1  # "then"
            body = self.statements(stop=("elif", "else", "fi"))
            branches.append((cond, body))
            tok = self.peek()
            if tok is None:
                break
            self.i += 1
            if tok.raw == "elif":
                continue
            if tok.raw == "else":
                orelse = self.statements(stop=("fi",))
                self.i += 1
            break
        return _If(branches, orelse)

    def case_block(self) -> "_Case":
        """``case WORD in PATTERN[|PATTERN]) BODY ;; ... esac`` (bash(1) Compound Commands)."""
        self.i += 1  # "case"
        subject = self.t[self.i]
        self.i += 1
        while self.peek() == "\n":
            self.i += 1
        if isinstance(self.peek(), Word) and self.peek().raw == "in":
            self.i += 1
        clauses = []
        while self.i < len(self.t):
            start = self.i
            while self.peek() in ("\n", ";"):
                self.i += 1
            tok = self.peek()
            if tok is None:
                break
            if isinstance(tok, Word) and tok.raw == "esac":
                self.i += 1
                break
            if tok == "(":
                self.i += 1
            patterns = []
            while isinstance(self.peek(), Word) or self.peek() == "|":
                if isinstance(self.peek(), Word):
                    patterns.append(self.peek())
                self.i += 1
            if self.peek() == ")":
                self.i += 1
            body = self.statements(stop=("esac", ";;"))
            if self.peek() == ";;":
                self.i += 1
            clauses.append((patterns, body))
            if self.i == start:  # nothing consumed: not a case we can read
                self.skip_until("esac", "case")
                break
        return _Case(subject, clauses)

    def skip_until(self, end: str, start: str) -> None:
        depth = 0
        while self.i < len(self.t):
            tok = self.t[self.i]
            self.i += 1
            if isinstance(tok, Word) and tok.raw == start:
                depth += 1
            elif isinstance(tok, Word) and tok.raw == end:
                depth -= 1
                if depth == 0:
                    return

    def skip_function(self) -> None:
        while self.i < len(self.t) and not (isinstance(self.t[self.i], Word) and self.t[self.i].raw == "{"):
            self.i += 1
        self.skip_until("}", "{")


class _Exit(Exception):
    pass


class _Walker:
    """Runs the statements against a ``Script`` (assignments, tests; commands recorded)."""

    def __init__(self, script: Script):
        self.s = script
        self.x = _Expander(script)

    def run(self, statements: list) -> None:
        last_ok = True
        for st in statements:
            if isinstance(st, _Command) and (st.link == "&&" and not last_ok or st.link == "||" and last_ok):
                continue
            if isinstance(st, _Skipped):
                self.s.notes.append(f"{st.what} not evaluated")
            elif isinstance(st, _If):
                self.run_if(st)
            elif isinstance(st, _Case):
                self.run_case(st)
            else:
                last_ok = self.command(st.words)

    def run_case(self, block: _Case) -> None:
        """The first clause whose pattern (a glob) matches the expanded word."""
        value = self.x.text(block.subject.raw)
        if SUBSTITUTION in value:
            self.s.notes.append(f"'case {block.subject.raw}' on an unknown value: its first matching pattern taken")
        for patterns, body in block.clauses:
            if any(fnmatch.fnmatchcase(value, self.x.text(p.raw)) for p in patterns):
                self.run(body)
                return

    def run_if(self, block: _If) -> None:
        for cond, body in block.branches:
            if self.condition(cond):
                self.run(body)
                return
        self.run(block.orelse)

    def condition(self, statements: list) -> bool:
        ok = True
        for st in statements:
            if isinstance(st, _Command):
                if st.link == "&&" and not ok or st.link == "||" and ok:
                    continue
                ok = self.command(st.words)
        return ok

    def command(self, words: list) -> bool:
        """Run one simple command; returns its success as far as a launch script cares."""
        raws = [w.raw for w in words]
        i = 0
        while i < len(raws) and _ASSIGN.match(raws[i]):  # leading assignments
            self.assign(raws[i])
            i += 1
        if i == len(raws):
            return True
        if raws[i] in ("[[", "[", "test", "!") and raws[i] != "!" or raws[i:i + 2] in (["!", "[["], ["!", "["]):
            return self.test(raws[i:])
        expanded = [f for r in raws[i:] for f in self.x.fields(r)]
        if not expanded:
            return True
        name = expanded[0]
        if name in ("export", "declare", "local", "readonly", "typeset"):
            for r in raws[i + 1:]:
                if _ASSIGN.match(r):
                    self.assign(r)
            return True
        if name == "exit":
            self.s.exited = " ".join(expanded)
            raise _Exit()
        if name in ("source", "."):
            self.s.notes.append(f"'{' '.join(expanded[:2])}' not followed (its variables are unknown here)")
            return True
        if name == "eval":  # bash(1) eval: its arguments, joined by spaces, are read and run as a command
            line = " ".join(expanded[1:]).replace(SUBSTITUTION, f"'{SUBSTITUTION}'")  # a placeholder, not a redirection
            self.run(_Parser(tokenize(line)).statements())
            return True
        if name in ("true", ":"):
            return True
        if name == "false":
            return False
        self.s.commands.append(expanded)
        return True

    def assign(self, raw: str) -> None:
        name, op, value = _ASSIGN.match(raw).groups()
        if value.startswith("(") and value.endswith(")"):
            items = [f for w in tokenize(value[1:-1]) if isinstance(w, Word) for f in self.x.fields(w.raw)]
            old = self.s.arrays.get(name, []) if op == "+=" else []
            self.s.arrays[name] = old + items
            if name in self.s.array_order:
                self.s.array_order.remove(name)
            self.s.array_order.append(name)
            return
        text = self.x.text(value)
        if op == "+=" and name in self.s.arrays:
            self.s.arrays[name].append(text)
            return
        self.s.variables[name] = (self.s.variables.get(name, "") if op == "+=" else "") + text

    def test(self, raws: list) -> bool:
        """A ``[[ ]]`` / ``[ ]`` / ``test`` command."""
        words = [w for w in raws if w not in ("[[", "]]", "[", "]", "test")]
        groups, ops, current = [], [], []
        for w in words:
            if w in ("&&", "||", "-a", "-o"):
                groups.append(current)
                ops.append("&&" if w in ("&&", "-a") else "||")
                current = []
            else:
                current.append(w)
        groups.append(current)
        ok = self.simple_test(groups[0])
        for op, group in zip(ops, groups[1:]):
            ok = (ok and self.simple_test(group)) if op == "&&" else (ok or self.simple_test(group))
        return ok

    def simple_test(self, raws: list) -> bool:
        negate = False
        while raws and raws[0] == "!":
            negate, raws = not negate, raws[1:]
        vals = [self.x.text(r) for r in raws]
        result = self._evaluate_test(vals, raws)
        return result != negate

    def _evaluate_test(self, vals: list, raws: list) -> bool:
        if len(vals) == 2 and vals[0] in ("-z", "-n"):
            return (vals[1] == "") == (vals[0] == "-z")
        if len(vals) == 2 and vals[0] in ("-f", "-e", "-d", "-r", "-x", "-s"):
            return True  # the files a script checks for are taken as present
        if len(vals) == 1:
            return vals[0] != ""
        if len(vals) == 3:
            a, op, b = vals
            if op in ("==", "="):
                return a == b
            if op == "!=":
                return a != b
            ints = {"-eq": int.__eq__, "-ne": int.__ne__, "-lt": int.__lt__, "-le": int.__le__, "-gt": int.__gt__, "-ge": int.__ge__}
            if op in ints and re.fullmatch(r"-?\d+", a) and re.fullmatch(r"-?\d+", b):
                return ints[op](int(a), int(b))
        self.s.notes.append(f"test [[ {' '.join(raws)} ]] not evaluated (taken as false)")
        return False


def read_script(text: str, path: str = "script.sh", environment: dict | None = None) -> Script:
    """Walk ``text`` as bash would (without running anything) and return what it did."""
    script = Script(path=path, variables=dict(environment or {}))
    for line in text.splitlines():
        m = re.match(r"\s*#SBATCH\s+(.*)", line)
        if m:
            script.sbatch += m.group(1).split("#", 1)[0].split()
    try:
        _Walker(script).run(_Parser(tokenize(text)).statements())
    except _Exit:
        pass
    script.notes = list(dict.fromkeys(script.notes))
    return script
