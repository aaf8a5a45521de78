"""Shell arithmetic ``$((...))`` on integers, with limits, never Python's ``eval``.

bash(1), ARITHMETIC EVALUATION: fixed-width integers (``intmax_t``, 64-bit signed), operators in
decreasing precedence ``- + ! ~`` (unary), ``**``, ``* / %``, ``+ -``, ``<< >>``, ``<= >= < >``,
``== !=``, ``&``, ``^``, ``|``, ``&&``, ``||``, ``expr ? expr : expr``; constants decimal, ``0x``
hex, leading-``0`` octal, ``base#digits``. Division truncates toward zero, as C does.

Where bash silently wraps around (``9**9**9``, ``10**5000``), a launch file means nothing
sensible: ``ArithmeticLimit`` says so in one line, after at most a few hundred steps (every
intermediate stays within 64 bits, so nothing grows: a bomb is answered in microseconds).
Assignment operators, ``++``/``--`` and the comma operator are ``Unsupported``.
"""

from __future__ import annotations

import re

INT_MIN, INT_MAX = -(2**63), 2**63 - 1
MAX_EXPRESSION = 10_000
"""Characters in one expression after variables are substituted."""
MAX_DEPTH = 200
"""Nesting of parentheses and unary operators."""

_TOKEN = re.compile(r"\s*(?:(\d+#[0-9A-Za-z@_]+|0[xX][0-9A-Fa-f]+|\d+)|(\*\*|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%<>&^|!~?:()]))")
_BINARY = {"||": 1, "&&": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6, "<": 7, ">": 7, "<=": 7, ">=": 7,
           "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "%": 10, "**": 11}


class ArithmeticLimit(ValueError):
    """The expression's value is beyond 64-bit integers, or it divides by zero."""


class Unsupported(ValueError):
    """Syntax outside the subset (assignments, ``++``, ``,``, a word that is not a number)."""


def _check(value: int, what: str) -> int:
    if not INT_MIN <= value <= INT_MAX:
        raise ArithmeticLimit(f"{what} overflows 64-bit integers")
    return value


def _number(text: str) -> int:
    if "#" in text:
        base_s, digits = text.split("#", 1)
        base = int(base_s)
        if not 2 <= base <= 64:
            raise Unsupported(f"base {base}")
        alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ@_"
        if base <= 36:
            digits = digits.lower()
        value = 0
        for ch in digits:
            d = alphabet.find(ch)
            if not 0 <= d < base:
                raise Unsupported(f"digit {ch!r} in base {base}")
            value = _check(value * base + d, text)
        return value
    if len(text) > 24:  # int() of thousands of digits is slow (and capped) in Python
        raise ArithmeticLimit(f"{text[:20]}... ({len(text):,} digits) overflows 64-bit integers")
    if text[:2] in ("0x", "0X"):
        return _check(int(text, 16), text)
    if len(text) > 1 and text[0] == "0":
        try:
            return _check(int(text, 8), text)
        except ValueError:
            raise Unsupported(f"{text} is not octal") from None
    return _check(int(text), text)


def _power(base: int, exp: int) -> int:
    if exp < 0:
        raise ArithmeticLimit("exponent less than 0")
    if base in (0, 1) or exp == 0:
        return 1 if exp == 0 else base
    if base == -1:
        return -1 if exp % 2 else 1
    if exp > 63:  # |base| >= 2: beyond 2**63
        raise ArithmeticLimit(f"{base}**{exp} overflows 64-bit integers")
    return _check(base**exp, f"{base}**{exp}")


def _apply(op: str, a: int, b: int) -> int:
    if op in ("/", "%"):
        if b == 0:
            raise ArithmeticLimit("division by 0")
        q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)  # C: toward zero
        return _check(q, f"{a} / {b}") if op == "/" else a - b * q
    if op == "**":
        return _power(a, b)
    if op in ("<<", ">>"):
        if b < 0 or b > 63:
            raise ArithmeticLimit(f"shift by {b}")
        return _check(a << b, f"{a} << {b}") if op == "<<" else a >> b
    value = {
        "+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
        "<": lambda: int(a < b), ">": lambda: int(a > b), "<=": lambda: int(a <= b), ">=": lambda: int(a >= b),
        "==": lambda: int(a == b), "!=": lambda: int(a != b), "&": lambda: a & b, "^": lambda: a ^ b,
        "|": lambda: a | b, "&&": lambda: int(bool(a) and bool(b)), "||": lambda: int(bool(a) or bool(b)),
    }[op]()
    return _check(value, f"{a} {op} {b}")


class _Parser:
    def __init__(self, text: str):
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                if text[pos:].strip() == "":
                    break
                raise Unsupported(f"{text[pos:pos + 10]!r}")
            self.tokens.append(("num", m.group(1)) if m.group(1) else ("op", m.group(2)))
            pos = m.end()
        self.i = 0
        self.depth = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, op: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None or (op is not None and tok != ("op", op)):
            raise Unsupported(f"expected {op or 'an operand'}")
        self.i += 1
        return tok

    def nest(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ArithmeticLimit(f"nested deeper than {MAX_DEPTH}")

    def expression(self) -> int:
        self.nest()
        cond = self.binary(1)
        if self.peek() == ("op", "?"):
            self.take("?")
            yes = self.expression()
            self.take(":")
            no = self.expression()
            cond = yes if cond else no
        self.depth -= 1
        return cond

    def binary(self, min_prec: int) -> int:
        left = self.operand()
        while True:
            tok = self.peek()
            if tok is None or tok[0] != "op" or tok[1] not in _BINARY or _BINARY[tok[1]] < min_prec:
                return left
            op = tok[1]
            self.i += 1
            prec = _BINARY[op]
            right = self.binary(prec if op == "**" else prec + 1)  # ** is right-associative
            left = _apply(op, left, right)

    def operand(self) -> int:
        kind, text = self.take()
        if kind == "num":
            return _number(text)
        self.nest()
        try:
            if text == "(":
                value = self.expression()
                self.take(")")
                return value
            if text in ("+", "-", "!", "~"):
                if self.peek() == ("op", text) and text in "+-":
                    raise Unsupported(f"{text}{text}")
                v = self.operand()
                return _check({"+": v, "-": -v, "!": int(not v), "~": ~v}[text], f"{text}{v}")
            raise Unsupported(f"{text!r}")
        finally:
            self.depth -= 1


def evaluate(text: str) -> int:
    """The value of ``text`` (variables already substituted); ``ArithmeticLimit`` or
    ``Unsupported`` (ValueErrors) otherwise. An empty expression is 0, as in bash."""
    if len(text) > MAX_EXPRESSION:
        raise ArithmeticLimit(f"longer than {MAX_EXPRESSION:,} characters")
    parser = _Parser(text)
    if not parser.tokens:
        return 0
    value = parser.expression()
    if parser.peek() is not None:
        raise Unsupported(f"{parser.peek()[1]!r}")
    return value
