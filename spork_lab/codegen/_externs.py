"""Calls of exo's externs (`relu`, `select`, `sigmoid`, `sin`, `sqrt`, `expf`, `fmaxf`) in both of our compilers.

exo 1.0's printing of them goes wrong in several ways: its `LoopIR_FindExterns`
misses an extern inside another's arguments (`select(x, 0.0, x, relu(y))` left
`_relu_float` undefined: gcc's or ctypes' error); its helpers are C for the
argument's type, which means nothing for `__half` or `__nv_bfloat16` in CUDA (no
overload of `x > 0.0`) nor for the host's bf16 struct; and it casts an argument
without parentheses (`(float)x * y` for `relu(x * y)`). `ExternCalls` computes
a 16-bit call in float and rounds its result once, parenthesizes the
arguments, and records each helper it calls with the C type it was called
with, so that the caller defines exactly those. Device code defined none of
them: `cuda_definitions` qualifies exo's helper text for it. exo names one
helper without its type (`sigmoid`), so C could not define it for f32 and f64
at once (gcc: conflicting types): ours are named `_sigmoid_float` and
`_sigmoid_double`, as exo names `_relu_float`. C's `sin`, `sqrt` and `exp`
compute in double (and f32 `sqrt(x) + x` added in double): ours call them on
a double and cast the result to the call's type, so the GPU computes what C
does (up to the last bits of each math library's `sin` and `exp`). An extern
of an integer type (`fmaxf` of two i32, `expf` of an i8) returns what its helper
computes, often a float, through `_conversions.FLOAT_TO_INT`: C's cast of an
out-of-range float is undefined, and gcc and the GPU disagreed on it.
"""

from __future__ import annotations

import re

from exo.core.LoopIR import LoopIR

from ._conversions import FLOAT_TO_INT, is_int_ctype


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
        # exo's call text with holes for the arguments: our rewrites of it see exo's text only, not the arguments'
        # (a nested call, already rewritten: `sin((double)(double)...`)
        template = _in_double(_typed_names(e.f, ctype, e.f.compile([f"@{i}@" for i in range(len(e.args))], ctype)))
        args = [f"({self.comp_e(a)})" for a in e.args]  # exo casts `(float)a * b`: a only
        call = re.sub(r"@(\d+)@", lambda m: args[int(m[1])], template)
        if e.f is not FLOAT_TO_INT and is_int_ctype(ctype):  # `fmaxf`, `expf` of ints return a float: C's cast of
            self.extern_uses.add((FLOAT_TO_INT, ctype))       # one out of range is undefined (as a store's, below)
            return _typed_names(FLOAT_TO_INT, ctype, FLOAT_TO_INT.compile([call], ctype))
        return self.rounded_from_float(call, base) if narrow else f"(({ctype}){call})"

    def rounded_from_float(self, text: str, base) -> str:
        """C of a float expression rounded to the 16-bit type `base` (once, to nearest even)."""
        return f"(({base.ctype()})({text}))"


def c_definitions(uses: set) -> list:
    """The file-scope C text of the extern helpers in `uses` ((Extern, C type) pairs), in a stable order."""
    return [_in_double(_typed_names(f, t, f.globl(t))) for f, t in sorted(uses, key=lambda u: (u[0].name(), u[1]))]


def cuda_definitions(uses: set) -> tuple:
    """The same for device code: exo writes its helpers for C, made `static __device__ inline` here."""
    return tuple(re.sub(r"^(\w+) (\w+\()", r"static __device__ inline \1 \2", text, flags=re.MULTILINE)
                 for text in c_definitions(uses))


def _in_double(text: str) -> str:
    """C's `sin`, `sqrt` and `exp` take and return a double; CUDA C++ overloads them for float (`sin(x)` of a
    float is sinf there, another result) and has none for ints (nvcc refused `sin` of an i32). A double
    argument gives both compilers C's meaning: `sin((double)(float)(x))`. (The result is cast back at the call.)"""
    return re.sub(r"\b(sin|sqrt|exp)\(", r"\1((double)", text)


def _typed_names(extern, ctype: str, text: str) -> str:
    """`text` with the helper exo names without its type (`sigmoid`) renamed `_sigmoid_float` (or `_double`)."""
    name = extern.name()
    if not re.search(rf"^{re.escape(ctype)} {name}\(", extern.globl(ctype), flags=re.MULTILINE):
        return text
    return re.sub(rf"\b{name}\(", f"_{name}_{ctype}(", text)
