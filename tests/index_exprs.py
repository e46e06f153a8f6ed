"""Random integer index expressions over loop iterators and sizes, for the differential tests of the printers.

An expression is a tree of tuples: ("var", name), ("const", c), ("neg", e),
(op, lhs, rhs) with op in + - *, and ("/", e, c) / ("%", e, c) with a positive
constant c (what exo's type checker allows: `*` with a constant side,
division and modulo by positive constants). `value` is the language's meaning
(floor division and modulo, as Python); `source` is Exo syntax.
"""

from __future__ import annotations

import random


def random_expr(rng: random.Random, names: tuple, depth: int = 4):
    """An expression over `names` whose intermediate values are often negative."""
    if depth == 0 or rng.random() < 0.2:
        return ("var", rng.choice(names)) if rng.random() < 0.7 else ("const", rng.randint(-9, 9))
    kind = rng.choice(["+", "-", "*", "/", "%", "%", "/", "neg", "+", "-"])
    sub = random_expr(rng, names, depth - 1)
    if kind == "neg":
        return ("neg", sub)
    if kind in "/%":
        return (kind, sub, rng.randint(1, 9))
    if kind == "*":
        c = ("const", rng.randint(-5, 9))
        return ("*", c, sub) if rng.random() < 0.5 else ("*", sub, c)
    return (kind, sub, random_expr(rng, names, depth - 1))


def value(e, env: dict) -> int:
    """The language's meaning of e: `/` and `%` floor, like Python's // and %."""
    tag = e[0]
    if tag == "var":
        return env[e[1]]
    if tag == "const":
        return e[1]
    if tag == "neg":
        return -value(e[1], env)
    if tag in "/%":
        a = value(e[1], env)
        return a // e[2] if tag == "/" else a % e[2]
    a, b = value(e[1], env), value(e[2], env)
    return a + b if tag == "+" else a - b if tag == "-" else a * b


def source(e) -> str:
    """Exo source text of e, fully parenthesised (so the test never depends on our own precedence rules)."""
    tag = e[0]
    if tag == "var":
        return e[1]
    if tag == "const":
        return f"({e[1]})" if e[1] < 0 else str(e[1])
    if tag == "neg":
        return f"(-{source(e[1])})"
    rhs = str(e[2]) if tag in "/%" else source(e[2])
    return f"({source(e[1])} {tag} {rhs})"


def value_range(e, domains: dict) -> tuple:
    """(lowest, highest) value of e over every point of `domains` (name -> list of values)."""
    import itertools

    names = sorted(domains)
    values = [value(e, dict(zip(names, point))) for point in itertools.product(*(domains[n] for n in names))]
    return min(values), max(values)
