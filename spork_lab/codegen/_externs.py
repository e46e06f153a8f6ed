"""Calls of exo's externs (`relu`, `select`, `sigmoid`, `sin`, `sqrt`, `expf`, `fmaxf`) in both of our compilers.

exo 1.0's printing of them goes wrong three ways: its `LoopIR_FindExterns`
misses an extern inside another's arguments (`select(x, 0.0, x, relu(y))` left
`_relu_float` undefined: gcc's or ctypes' error); its helpers are C for the
argument's type, which means nothing for `__half` or `__nv_bfloat16` in CUDA (no
overload of `x > 0.0`) nor for the host's bf16 struct; and it casts an argument
without parentheses (`(float)x * y` for `relu(x * y)`). `ExternCalls` computes
a 16-bit call in float and rounds its result once, parenthesizes the
arguments, and records each helper it calls with the C type it was called
with, so that the caller defines exactly those. Device code defined none of
them: `cuda_definition` qualifies exo's helper text for it.
"""

from __future__ import annotations

import re

from exo.core.LoopIR import LoopIR


class ExternCalls:
    """Mixin for subclasses of exo's C `Compiler`: `extern_uses` is the set of (Extern, C type) it called."""

    def __init__(self, *args, **kwargs) -> None:
        self.extern_uses: set = set()
        super().__init__(*args, **kwargs)

    def comp_e(self, e, prec=0):
        if not isinstance(e, LoopIR.Extern):
            return super().comp_e(e, prec)
        base = e.type.basetype()
        narrow = isinstance(base, LoopIR.F16)  # f16 and bf16 (a subclass)
        ctype = "float" if narrow else base.ctype()
        self.extern_uses.add((e.f, ctype))
        call = e.f.compile([f"({self.comp_e(a)})" for a in e.args], ctype)  # exo casts `(float)a * b`: a only
        return self.rounded_from_float(call, base) if narrow else call

    def rounded_from_float(self, text: str, base) -> str:
        """C of a float expression rounded to the 16-bit type `base` (once, to nearest even)."""
        return f"(({base.ctype()})({text}))"


def cuda_definition(extern, ctype: str) -> str:
    """exo's file-scope text for the extern's helper, its functions made `__device__` (exo writes them for C)."""
    return re.sub(rf"^{re.escape(ctype)} (\w+\()", rf"static __device__ inline {ctype} \1", extern.globl(ctype),
                  flags=re.MULTILINE)
