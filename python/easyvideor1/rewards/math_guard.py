"""Cheap size estimates for math answers, so an expression whose evaluation is known to
explode never reaches the CAS.

:func:`check_expression` reads LaTeX or plain text (``10^{10^{8}}``, ``10**10**8``,
``(1+x)^{20000}``, ``((10!)!)!``, ``\\binom{10^8}{5\\cdot 10^7}``) with a tolerant
recursive-descent reader that only follows numbers, symbols, ``+ - * /``, ``^``/``**``,
``!``, groups, ``\\frac``, ``\\binom`` and ``\\sqrt``; anything else is a symbol or a
separator, so it never rejects text because of syntax it does not know, only on positive
evidence of a blow-up. For each node it estimates the size of what sympy would build:

- digits of a number (literals, powers, factorials, binomials, products): over
  ``max_digits`` is refused (``10^{10^{8}}``: about 1e8 digits; a power tower is caught
  because the inner power's value is known before the outer one is estimated);
- a power of a sum (``(1+x)^{20000}``, ``(a+b+c+d)^{60}``): the number of terms of its
  expansion, ``C(n + t - 1, t - 1)`` for ``t`` terms, over ``max_terms`` is refused;
- a factorial of more than ``MAX_FACTORIAL_ARG`` (so ``10!!``, read as ``(10!)!``, too).

The refusal is :class:`ExpressionTooLarge`, whose message starts "expression too large to
evaluate: ". Cost: one pass over the text (answers are at most 10,000 characters).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

MAX_DIGITS = 10_000  # 2^{20000} (6,021 digits) verifies in ~0.3 s; 10^{10^8} never ends
MAX_TERMS = 500  # (1+x)^{500} takes ~1 s to compare, (1+x)^{2000} ~10 s, (a+b+c+d)^{60} minutes
MAX_FACTORIAL_ARG = 100_000
MAX_DEPTH = 100  # nesting levels read; deeper text is refused (no estimate can be made)

_TOKEN = re.compile(r"""
    (?P<num>\d+(?:\.\d*)?|\.\d+)
  | (?P<pow>\*\*|\^)
  | (?P<cmd>\\[A-Za-z]+|\\.)
  | (?P<sym>[A-Za-z])
  | (?P<op>[-+*/!{}()\[\]])
  | (?P<ws>\s+)
  | (?P<sep>.)
""", re.X | re.S)
_SKIP = {"\\left", "\\right", "\\big", "\\Big", "\\bigg", "\\Bigg", "\\bigl", "\\bigr", "\\Bigl", "\\Bigr",
         "\\displaystyle", "\\textstyle", "\\,", "\\;", "\\:", "\\!", "\\ ", "\\quad", "\\qquad", "\\limits"}
_ALIAS = {"\\cdot": "*", "\\times": "*", "\\ast": "*", "\\div": "/", "\\{": "(", "\\}": ")",
          "\\lbrace": "(", "\\rbrace": ")", "\\lparen": "(", "\\rparen": ")",
          "\\frac": "frac", "\\dfrac": "frac", "\\tfrac": "frac", "\\cfrac": "frac",
          "\\binom": "binom", "\\dbinom": "binom", "\\tbinom": "binom", "\\sqrt": "sqrt"}
_OPEN = {"{": "}", "(": ")", "[": "]"}
_CLOSE = set(_OPEN.values())
_LOG10_2 = math.log10(2)


class ExpressionTooLarge(ValueError):
    """The expression's evaluation is known to explode; the message says which part."""

    def __init__(self, what: str):
        super().__init__(f"expression too large to evaluate: {what}")


@dataclass(frozen=True, slots=True)
class _Est:
    size: float  # digits of the numeric part: |log10 |value|| (0 for 0 and 1)
    symbolic: bool = False
    terms: float = 1.0  # additive terms, for a symbolic expression


_SYMBOL = _Est(0.0, True)


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    for m in _TOKEN.finditer(text):
        kind, tok = m.lastgroup, m.group()
        if kind == "ws" or tok in _SKIP:
            continue
        if kind == "cmd":
            tok = _ALIAS.get(tok, "sym")
        elif kind == "sym":
            tok = "sym"
        elif kind == "pow":
            tok = "^"
        elif kind == "sep":
            tok = ","
        elif kind == "num":
            tok = "#" + tok
        out.append(tok)
    return out


def _number(literal: str, max_digits: int) -> _Est:
    digits = sum(c.isdigit() for c in literal)
    if digits > max_digits:
        raise ExpressionTooLarge(f"a number with {digits} digits (limit {max_digits})")
    whole = literal.split(".")[0].lstrip("0")
    if len(whole) > 15:
        return _Est(len(whole) - 1 + math.log10(float(whole[:15]) / 1e14))
    value = float(literal)
    return _Est(abs(math.log10(value)) if value > 0 else 0.0)


def _value(est: _Est) -> float:
    """The magnitude of a numeric node (an upper bound: 10^size)."""
    return math.inf if est.size > 300 else 10.0 ** est.size


def _log10_binom(n: float, k: float) -> float:
    if not math.isfinite(n):
        return math.inf
    k = min(k, max(n - k, 0.0))
    if k <= 0:
        return 0.0
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)) / math.log(10)


class _Reader:
    def __init__(self, tokens: list[str], max_digits: int, max_terms: int):
        self.toks, self.pos = tokens, 0
        self.max_digits, self.max_terms = max_digits, max_terms
        self.depth = 0

    def peek(self) -> str | None:
        return self.toks[self.pos] if self.pos < len(self.toks) else None

    def run(self) -> None:
        while self.pos < len(self.toks):
            before = self.pos
            self.expr()
            if self.pos == before:
                self.pos += 1  # a stray closer or separator: skip it

    def expr(self) -> _Est | None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExpressionTooLarge(f"nested more than {MAX_DEPTH} levels deep")
        try:
            left = self.term()
            while left is not None and self.peek() in ("+", "-"):
                self.pos += 1
                right = self.term()
                if right is None:
                    break
                left = self._add(left, right)
            return left
        finally:
            self.depth -= 1

    def term(self) -> _Est | None:
        left = self.power()
        while left is not None:
            tok = self.peek()
            if tok in ("*", "/"):
                self.pos += 1
            elif not self._starts_primary(tok):
                break
            right = self.power()
            if right is None:
                break
            left = self._mul(left, right)
        return left

    def power(self) -> _Est | None:
        base = self.unary()
        if base is None:
            return None
        while self.peek() == "!":
            self.pos += 1
            base = self._factorial(base)
        if self.peek() == "^":
            self.pos += 1
            exponent = self.power()  # right-associative: 10^10^8 is 10^(10^8)
            if exponent is not None:
                base = self._pow(base, exponent)
        return base

    def unary(self) -> _Est | None:
        while self.peek() in ("-", "+"):
            self.pos += 1
        return self.primary()

    @staticmethod
    def _starts_primary(tok: str | None) -> bool:
        return tok is not None and (tok[0] == "#" or tok in ("sym", "frac", "binom", "sqrt") or tok in _OPEN)

    def primary(self) -> _Est | None:
        tok = self.peek()
        if tok is None:
            return None
        if tok[0] == "#":
            self.pos += 1
            return _number(tok[1:], self.max_digits)
        if tok == "sym":
            self.pos += 1
            return _SYMBOL
        if tok in _OPEN:
            self.pos += 1
            inner = self.expr()
            while self.peek() not in _CLOSE and self.peek() is not None:  # a separator inside: read on
                before = self.pos
                more = self.expr()
                if self.pos == before:
                    self.pos += 1
                if more is not None and inner is not None:
                    inner = _Est(max(inner.size, more.size), inner.symbolic or more.symbolic, inner.terms)
                inner = inner or more
            if self.peek() is not None:
                self.pos += 1
            return inner if inner is not None else _SYMBOL
        if tok in ("frac", "binom"):
            self.pos += 1
            top, bottom = self.argument(), self.argument()
            if top is None or bottom is None:
                return top or bottom or _SYMBOL
            if tok == "frac":
                return self._mul(top, bottom)
            return self._binom(top, bottom)
        if tok == "sqrt":
            self.pos += 1
            if self.peek() == "[":
                self.primary()  # the root's index
            inner = self.argument()
            return _SYMBOL if inner is None else _Est(inner.size / 2, inner.symbolic, inner.terms)
        return None

    def argument(self) -> _Est | None:
        """A macro argument: a braced group or one token."""
        if self.peek() == "{":
            return self.primary()
        tok = self.peek()
        if tok is not None and tok[0] == "#":  # \frac12: one digit per argument
            self.pos += 1
            if len(tok) > 2:
                self.toks.insert(self.pos, "#" + tok[2:])
            return _number(tok[1], self.max_digits)
        return self.unary()

    # -- estimates ------------------------------------------------------------------------------

    def _digits(self, digits: float, what: str) -> float:
        if digits != digits:  # nan: 0 * inf, a power of 0 or 1
            return 0.0
        if digits > self.max_digits:
            raise ExpressionTooLarge(f"{what} with about {digits:.3g} digits (limit {self.max_digits})")
        return digits

    @staticmethod
    def _add(a: _Est, b: _Est) -> _Est:
        if a.symbolic or b.symbolic:
            return _Est(max(a.size, b.size), True, a.terms + b.terms)
        return _Est(max(a.size, b.size) + _LOG10_2)

    def _mul(self, a: _Est, b: _Est) -> _Est:
        size = self._digits(a.size + b.size, "a product")
        return _Est(size, a.symbolic or b.symbolic, min(a.terms * b.terms, 1e300))

    def _pow(self, base: _Est, exponent: _Est) -> _Est:
        if exponent.symbolic:
            return _Est(base.size, True, base.terms)
        n = _value(exponent)
        digits = self._digits(0.0 if base.size == 0 else n * base.size, "a power")
        if not base.symbolic:
            return _Est(digits)
        if base.terms >= 2:
            terms = _log10_binom(n + base.terms - 1, base.terms - 1)
            if terms > math.log10(self.max_terms):
                raise ExpressionTooLarge(
                    f"a power of a sum of {base.terms:g} terms to the power {n:.6g} expands to about "
                    f"10^{terms:.3g} terms (limit {self.max_terms})")
            return _Est(digits, True, 10.0 ** terms)
        return _Est(digits, True)

    def _factorial(self, arg: _Est) -> _Est:
        if arg.symbolic:
            return arg
        n = _value(arg)
        if n > MAX_FACTORIAL_ARG:
            raise ExpressionTooLarge(f"a factorial of about {n:.3g} (limit {MAX_FACTORIAL_ARG})")
        return _Est(self._digits(math.lgamma(n + 1) / math.log(10), "a factorial"))

    def _binom(self, n: _Est, k: _Est) -> _Est:
        if n.symbolic or k.symbolic:
            return _Est(max(n.size, k.size), True)
        return _Est(self._digits(_log10_binom(_value(n), _value(k)), "a binomial coefficient"))


def check_expression(text: str, *, max_digits: int = MAX_DIGITS, max_terms: int = MAX_TERMS) -> None:
    """Raise :class:`ExpressionTooLarge` when evaluating ``text`` is known to explode."""
    if not text or not any(c.isdigit() for c in text):
        return  # no number, no blow-up
    _Reader(_tokens(text), max_digits, max_terms).run()
