"""C text of index and scalar expressions that means what the program says.

exo 1.0's C printer drops the parentheses around a `%` (or `/`) right operand
of `*` (`4 * (t % 8)` prints as `4 * t % 8`, which C reads as `(4 * t) % 8`),
prints `%` as C's truncating remainder where the language means floor modulo
(as Python does; the abstract machine evaluates it that way), folds constant
`a / b` with true division, and crashes on `0 % x`. `FaithfulExprs` replaces
its expression printing in both of our compilers (device CUDA and host C):

- `/` and `%` are floor division and floor modulo; C's `/` and `%` are used
  only where the left operand is provably non-negative (exo's range analysis),
  else the helpers `exo_floor_div` / `spork_floor_mod` (divisors are positive
  constants: exo's type checker demands it);
- parentheses wherever C's precedence and associativity would regroup the
  expression, and nowhere else;
- on the device, where an index is a 32-bit `int`, a sum, difference or
  product that exo's range analysis cannot bound within 32 bits is computed
  in 64 bits (`(long long) a * b`), unless it only adds and multiplies
  non-negative parts of an access's offset (then it is at most that offset,
  which is below the array's element count: arrays of 2^31 elements or more
  are refused at the call). `x[(1000003 * i) % 1000]` read the wrong elements
  from i = 2148 on an H200 before (audit of session 27).
"""

from __future__ import annotations

from typing import NamedTuple

from exo.backend.LoopIR_compiler import lift_to_cir
from exo.core.LoopIR import CIR, LoopIR
from exo.rewrite.range_analysis import IndexRangeEnvironment, constant_bound

from ..core.ir import fold
from ..errors import CodegenError

# Both take a positive divisor, as exo's type checker guarantees; 64-bit, so no index is narrowed.
FLOOR_HELPERS = {
    "exo_floor_div": "{q} long long exo_floor_div(long long num, long long quot) "
    "{{ return (num >= 0 ? num : num - (quot - 1)) / quot; }}",
    "spork_floor_mod": "{q} long long spork_floor_mod(long long num, long long quot) "
    "{{ long long r = num % quot; return r < 0 ? r + quot : r; }}",
}


def floor_helpers(qualifier: str) -> str:
    """The floor-division helpers' definitions, e.g. with qualifier "static" (C) or "__host__ __device__ inline" (CUDA)."""
    return "\n".join(text.format(q=qualifier) for text in FLOOR_HELPERS.values())


# How tightly a printed form binds: an operand whose level is below what its
# position needs gets parentheses. _PREC maps a level to exo's precedence
# numbers (op_prec: 50 for + -, 60 for * / %), which exo's callers pass as `prec`.
_ATOM, _MUL, _ADD = 3, 2, 1
_LEVEL = {"+": _ADD, "-": _ADD, "*": _MUL, "/": _MUL, "%": _MUL}
_PREC = {_ADD: 50, _MUL: 60, _ATOM: 100}


class _Text(NamedTuple):
    """A printed expression: its text, how tightly it binds, and whether C computes it in 64 bits."""

    text: str
    level: int
    wide: bool = False


class FaithfulExprs:
    """Mixin for subclasses of exo's C `Compiler`: expression printing with the language's meaning."""

    index_bits = 64  # the width of the C type holding an index: 32 on the device (`int`), where sums may need widening

    @property
    def range_env(self) -> IndexRangeEnvironment:
        return self._range_env

    @range_env.setter
    def range_env(self, env: IndexRangeEnvironment) -> None:
        """exo makes it before compiling the body. Where indices are 32-bit, sizes are too (larger ones are refused
        at the call), which bounds the loops' iterators: `128 * task + t` needs no widening."""
        if self.index_bits < 64:
            for name, (lo, hi) in list(env.env.items()):
                env.env[name] = (lo, self.index_limit - 1 if hi is None else hi)
        self._range_env = env

    @property
    def index_limit(self) -> int:
        """2^(index_bits - 1): an index holds the values in [-limit, limit)."""
        return 2 ** (self.index_bits - 1)

    # ---- index arithmetic (exo's CIR: accesses, windows, shapes, strides) ----
    # exo folds constants (`1 / 3` to 0.333...) in simplify_cir before its printer runs,
    # so every caller of simplify_cir is replaced: accesses, shapes, window fields.

    def comp_cir(self, e, env, prec) -> str:
        """An access offset, window offset, shape or stride: each at most its array's element count."""
        text, level, _ = self._cir(_simplify(e), env, bounded=True)
        return f"({text})" if _PREC[level] < prec else text

    def access_str(self, nm, idx_list) -> str:
        typ = self.envtyp[nm]
        offset = self.get_idx_offset(nm, typ, [lift_to_cir(i, self.range_env) for i in idx_list])
        data = f"{self.env[nm]}.data" if typ.is_win() else self.env[nm]
        return f"{data}[{self.comp_cir(offset, self.env, prec=0)}]"

    def shape_strs(self, shape, prec=100) -> list:
        return [self.comp_cir(lift_to_cir(i, self.range_env), self.env, prec) for i in shape]

    def window_struct_fields(self, e) -> tuple:
        """(data pointer, strides) of a window expression; the memory's `window` hook places the pointer."""
        los = [w.lo if isinstance(w, LoopIR.Interval) else w.pt for w in e.idx]
        offsets = [self.comp_cir(lift_to_cir(lo, self.range_env), self.env, prec=0) for lo in los]
        strides = [self.comp_cir(s, self.env, prec=0) for s in self.get_strides(e.name, self.envtyp[e.name])]
        data = self.mems[e.name].window(self.envtyp[e.name], self.env[e.name], offsets, strides, e.srcinfo)
        kept = ", ".join(s for s, w in zip(strides, e.idx) if isinstance(w, LoopIR.Interval))
        return data, kept

    def _cir(self, e, env, bounded: bool = False) -> _Text:
        """A CIR expression's text; `bounded`: its value is known to fit an index (see the module docstring),
        and so are its parts while they are only added and multiplied, all non-negative."""
        if isinstance(e, CIR.Read):
            return _Text(env[e.name], _ATOM)
        if isinstance(e, CIR.Const):
            return _Text(str(e.val), _ATOM)
        if isinstance(e, CIR.Stride):
            return _Text(f"{env.get(e.name, e.name)}.strides[{e.dim}]", _ATOM)
        if isinstance(e, CIR.USub):
            arg = self._cir(e.arg, env)
            return _Text(_negate(arg.text, arg.level), _ATOM, arg.wide)
        if isinstance(e, CIR.BinOp):
            parts = bounded and e.op in "+*" and _cir_non_negative(e.lhs) and _cir_non_negative(e.rhs)
            lhs, rhs = self._cir(e.lhs, env, parts), self._cir(e.rhs, env, parts)
            wide = (self.index_bits < 64 and not bounded and e.op in "+-*"
                    and not self._fits(_cir_bound(e, self.range_env.env, self.index_limit)))
            return self._binop(e.op, lhs, rhs, _cir_non_negative(e.lhs), wide)
        raise CodegenError(f"internal: cannot print the index expression {e}")

    def _fits(self, bound: tuple) -> bool:
        """Does every value in `bound` (lo, hi; None: unknown) fit the C type of an index?"""
        lo, hi = bound
        return lo is not None and hi is not None and -self.index_limit <= lo and hi < self.index_limit

    # ---- LoopIR expressions (conditions, loop bounds, scalar code) ----

    def comp_e(self, e, prec=0):
        if isinstance(e, LoopIR.USub):
            arg = self._e(e.arg)
            return _negate(arg.text, arg.level)
        if not (isinstance(e, LoopIR.BinOp) and e.type.is_indexable() and e.op in _LEVEL):
            return super().comp_e(e, prec)
        text, level, _ = self._e(e)
        return f"({text})" if _PREC[level] < prec else text

    def _e(self, e) -> _Text:
        """A LoopIR expression's text."""
        if isinstance(e, LoopIR.BinOp) and e.type.is_indexable() and e.op in _LEVEL:
            lhs, rhs = self._e(e.lhs), self._e(e.rhs)
            non_negative = self.range_env.check_expr_bound(0, IndexRangeEnvironment.leq, e.lhs)
            wide = self.index_bits < 64 and e.op in "+-*" and not self._fits(constant_bound(e, self.range_env.env))
            return self._binop(e.op, lhs, rhs, non_negative, wide)
        if isinstance(e, (LoopIR.Read, LoopIR.Const, LoopIR.StrideExpr, LoopIR.USub)):
            return _Text(self.comp_e(e, 0), _ATOM)
        return _Text(self.comp_e(e, 0), _ADD if isinstance(e, LoopIR.BinOp) else _ATOM)

    def plus_text(self, e, term: str, wide: bool) -> str:
        """The text of LoopIR index `e` plus `term` (C text of a product, quotient or remainder at most), computed
        in 64 bits if `wide` (e.g. a task iterator's lower bound plus its task's index)."""
        return self._binop("+", self._e(e), _Text(term, _MUL), True, wide).text

    # ---- shared ----

    def _binop(self, op: str, lhs: _Text, rhs: _Text, lhs_non_negative: bool, wide: bool = False) -> _Text:
        """`wide`: the result may not fit a 32-bit index (callers compute it only there), so it is computed in
        64 bits: a cast of the left operand, unless an operand is 64-bit already (C then widens the other)."""
        a, a_level, b, b_level = lhs.text, lhs.level, rhs.text, rhs.level
        wide_operands = lhs.wide or rhs.wide
        if op in "/%" and not lhs_non_negative:
            helper = "exo_floor_div" if op == "/" else "spork_floor_mod"
            return _Text(self._call_static_helper(helper, a, b), _ATOM, True)  # the helpers return long long
        level = _LEVEL[op]
        cast = wide and not wide_operands
        if a_level < level or (cast and a_level < _ATOM):
            a = f"({a})"
        if cast:
            a = f"(long long) {a}"
        # C groups left to right: a right operand at the same level keeps its parentheses,
        # except under + where regrouping cannot change an integer result. (Not under *:
        # `6 * (i % 5 * 2)` is not `6 * i % 5 * 2`.)
        if b_level < level or (b_level == level and op != "+"):
            b = f"({b})"
        return _Text(f"{a} {op} {b}", level, wide_operands or cast)


def _negate(text: str, level: int) -> str:
    return f"-({text})" if level < _ATOM or text.startswith("-") else f"-{text}"


def _cir_non_negative(e) -> bool:
    if isinstance(e, CIR.Const):
        return e.val >= 0
    return bool(getattr(e, "is_non_neg", False))


def _cir_bound(e, ranges: dict, limit: int) -> tuple:
    """(lo, hi) of a CIR index expression's values (None: unknown), from the loop iterators' ranges; an index
    of unknown range holds the values in [-limit, limit)."""
    if isinstance(e, CIR.Const):
        return e.val, e.val
    if isinstance(e, CIR.Read):  # an iterator or size: an index, whatever its loop's bounds
        lo, hi = ranges.get(e.name, (None, None))
        return (-limit if lo is None else lo), (limit - 1 if hi is None else hi)
    if isinstance(e, CIR.USub):
        lo, hi = _cir_bound(e.arg, ranges, limit)
        return (None if hi is None else -hi), (None if lo is None else -lo)
    if not isinstance(e, CIR.BinOp):
        return None, None
    (a, b), (c, d) = _cir_bound(e.lhs, ranges, limit), _cir_bound(e.rhs, ranges, limit)
    if e.op == "%" and c is not None and c == d and c > 0:
        return 0, c - 1
    if None in (a, b, c, d):
        return None, None
    if e.op == "+":
        return a + c, b + d
    if e.op == "-":
        return a - d, b - c
    if e.op == "*":
        products = (a * c, a * d, b * c, b * d)
        return min(products), max(products)
    if e.op == "/" and c == d and c > 0:
        return a // c, b // c
    return None, None


def _simplify(e):
    """exo's simplify_cir with floor semantics for folded constants and no crash on `0 % x`."""
    if isinstance(e, CIR.USub):
        arg = _simplify(e.arg)
        if isinstance(arg, CIR.Const):
            return CIR.Const(-arg.val)
        return arg.arg if isinstance(arg, CIR.USub) else e.update(arg=arg)
    if not isinstance(e, CIR.BinOp):
        return e
    lhs, rhs, op = _simplify(e.lhs), _simplify(e.rhs), e.op
    lc = lhs.val if isinstance(lhs, CIR.Const) else None
    rc = rhs.val if isinstance(rhs, CIR.Const) else None
    if lc is not None and rc is not None:
        return CIR.Const(fold(op, lc, rc))
    if (lc == 0 and op in "*/%") or (rc == 0 and op == "*") or (rc == 1 and op == "%"):
        return CIR.Const(0)
    if (lc == 0 and op == "+") or (rc == 1 and op in "*/"):
        return rhs if lc == 0 else lhs
    if lc == 1 and op == "*":
        return rhs
    if rc == 0 and op in "+-":
        return lhs
    return CIR.BinOp(op, lhs, rhs, e.is_non_neg)
