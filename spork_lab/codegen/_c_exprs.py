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
  expression, and nowhere else.
"""

from __future__ import annotations

from exo.backend.LoopIR_compiler import lift_to_cir
from exo.core.LoopIR import CIR, LoopIR
from exo.rewrite.range_analysis import IndexRangeEnvironment

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


class FaithfulExprs:
    """Mixin for subclasses of exo's C `Compiler`: expression printing with the language's meaning."""

    # ---- index arithmetic (exo's CIR: accesses, windows, shapes, strides) ----
    # exo folds constants (`1 / 3` to 0.333...) in simplify_cir before its printer runs,
    # so every caller of simplify_cir is replaced: accesses, shapes, window fields.

    def comp_cir(self, e, env, prec) -> str:
        text, level = self._cir(_simplify(e), env)
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

    def _cir(self, e, env) -> tuple:
        if isinstance(e, CIR.Read):
            return env[e.name], _ATOM
        if isinstance(e, CIR.Const):
            return str(e.val), _ATOM
        if isinstance(e, CIR.Stride):
            return f"{env.get(e.name, e.name)}.strides[{e.dim}]", _ATOM
        if isinstance(e, CIR.USub):
            text, level = self._cir(e.arg, env)
            return _negate(text, level), _ATOM
        if isinstance(e, CIR.BinOp):
            lhs, rhs = self._cir(e.lhs, env), self._cir(e.rhs, env)
            return self._binop(e.op, lhs, rhs, _cir_non_negative(e.lhs))
        raise CodegenError(f"internal: cannot print the index expression {e}")

    # ---- LoopIR expressions (conditions, loop bounds, scalar code) ----

    def comp_e(self, e, prec=0):
        if isinstance(e, LoopIR.USub):
            text, level = self._e(e.arg)
            return _negate(text, level)
        if not (isinstance(e, LoopIR.BinOp) and e.type.is_indexable() and e.op in _LEVEL):
            return super().comp_e(e, prec)
        text, level = self._e(e)
        return f"({text})" if _PREC[level] < prec else text

    def _e(self, e) -> tuple:
        """(text, level) of a LoopIR expression."""
        if isinstance(e, LoopIR.BinOp) and e.type.is_indexable() and e.op in _LEVEL:
            lhs, rhs = self._e(e.lhs), self._e(e.rhs)
            non_negative = self.range_env.check_expr_bound(0, IndexRangeEnvironment.leq, e.lhs)
            return self._binop(e.op, lhs, rhs, non_negative)
        if isinstance(e, (LoopIR.Read, LoopIR.Const, LoopIR.StrideExpr, LoopIR.USub)):
            return self.comp_e(e, 0), _ATOM
        return self.comp_e(e, 0), _ADD if isinstance(e, LoopIR.BinOp) else _ATOM

    # ---- shared ----

    def _binop(self, op: str, lhs: tuple, rhs: tuple, lhs_non_negative: bool) -> tuple:
        (a, a_level), (b, b_level) = lhs, rhs
        if op in "/%" and not lhs_non_negative:
            helper = "exo_floor_div" if op == "/" else "spork_floor_mod"
            return self._call_static_helper(helper, a, b), _ATOM
        level = _LEVEL[op]
        if a_level < level:
            a = f"({a})"
        # C groups left to right: a right operand at the same level keeps its parentheses,
        # except under + where regrouping cannot change an integer result. (Not under *:
        # `6 * (i % 5 * 2)` is not `6 * i % 5 * 2`.)
        if b_level < level or (b_level == level and op != "+"):
            b = f"({b})"
        return f"{a} {op} {b}", level


def _negate(text: str, level: int) -> str:
    return f"-({text})" if level < _ATOM or text.startswith("-") else f"-{text}"


def _cir_non_negative(e) -> bool:
    if isinstance(e, CIR.Const):
        return e.val >= 0
    return bool(getattr(e, "is_non_neg", False))


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
