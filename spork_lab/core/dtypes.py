"""bf16 on exo 1.0, and the C names of 2-byte float types in CUDA code.

exo 1.0 has no bfloat16. `BF16` is a frozen subclass of exo's `LoopIR.F16`:
exo's analyses and scheduling ops treat it as any 16-bit float (isinstance
checks), while it compares unequal to `T.f16`, so a bf16 buffer never unifies
with an f16 instr parameter. Its C type is `spork_bf16`, which the generated
files define (`BF16_TYPEDEF_CUDA` in the .cu, `BF16_TYPEDEF_C` in the host
header: a struct of the bits, with the conversions through which host C
computes in float and rounds each bf16 operation, as CUDA's operators do).

The front end spells it `bf16` (`x: bf16[n] @ CudaGmemLinear`, `[bf16][16, 8]`
in instr signatures); the printer prints it back as `bf16`.

nvcc 13 cannot compile exo's C name of f16, `_Float16`, in device code
(internal compiler error), so CUDA code spells f16 `__half` (`cuda_source`).
"""

from __future__ import annotations

import re

import attrs
from exo.API_scheduling import TypeAbbrevA
from exo.core.LoopIR import UAST, LoopIR

BF16_C_NAME = "spork_bf16"
BF16_TYPEDEF_CUDA = f"#include <cuda_fp16.h>\n#include <cuda_bf16.h>\ntypedef __nv_bfloat16 {BF16_C_NAME};"
# Host C computes a bf16 operation in float and rounds it to bf16 (to nearest even; NaN as CUDA's 0x7fff): float's
# 24 bits hold the exact sum, difference or product of two bf16 values, and are more than 2 x 8 + 2 for a quotient,
# so one rounding gives CUDA's `__nv_bfloat16` result. A double rounds to float towards odd first (one rounding
# in effect, as CUDA's double conversion).
BF16_TYPEDEF_C = f"""#ifndef SPORK_BF16_DEFINED
#define SPORK_BF16_DEFINED
#include <string.h>
typedef struct {BF16_C_NAME} {{ uint16_t bits; }} {BF16_C_NAME};  // bfloat16's bits
static inline float {BF16_C_NAME}_to_f32({BF16_C_NAME} x) {{
    uint32_t u = (uint32_t) x.bits << 16; float f; memcpy(&f, &u, sizeof f); return f;
}}
static inline {BF16_C_NAME} {BF16_C_NAME}_from_f32(float f) {{
    uint32_t u; memcpy(&u, &f, sizeof u);
    {BF16_C_NAME} r;
    r.bits = f != f ? (uint16_t) 0x7fff : (uint16_t) ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return r;
}}
static inline {BF16_C_NAME} {BF16_C_NAME}_from_f64(double d) {{
    float f = (float) d; uint32_t u; memcpy(&u, &f, sizeof u);
    if ((double) f != d && d == d) {{ u -= (f < 0 ? -f : f) > (d < 0 ? -d : d); u |= 1u; memcpy(&f, &u, sizeof f); }}
    return {BF16_C_NAME}_from_f32(f);
}}
static inline float {BF16_C_NAME}_round(float f) {{ return {BF16_C_NAME}_to_f32({BF16_C_NAME}_from_f32(f)); }}
#endif"""


@attrs.frozen(init=False)
class BF16(LoopIR.F16):
    """The LoopIR type bfloat16 (memoized like exo's own scalar types)."""

    def ctype(self) -> str:
        return BF16_C_NAME

    def __str__(self) -> str:
        return "bf16"

    __repr__ = __str__


@attrs.frozen(init=False)
class UBF16(UAST.F16):
    """The front end's (UAST) spelling of bf16, which the type checker turns into `BF16()`."""


bf16 = BF16()


def install() -> None:
    """Let exo's set_precision take "bf16": its table of the type names it takes is exo's own."""
    TypeAbbrevA._shorthand["bf16"] = bf16


def is_bf16(t) -> bool:
    """Whether a LoopIR type (scalar, tensor or window) has base type bf16."""
    if isinstance(t, (LoopIR.Tensor, LoopIR.WindowType)):
        t = t.basetype()
    return isinstance(t, BF16)


_F16_C = re.compile(r"\b_Float16\b")



def cuda_source(text: str) -> str:
    """CUDA text with exo's f16 C name replaced by `__half` wherever exo printed it (casts, window structs)."""
    return _F16_C.sub("__half", text)
