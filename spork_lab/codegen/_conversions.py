"""Stores of a float value into an integer, with one meaning in both of our compilers.

exo prints `y = x` (y an integer, x a float) as C's cast `(int32_t)(x)`, which C
leaves undefined outside the integer's range and for NaN: x86's gcc gave
INT_MIN for 3e9 and NaN, and wrapped `(uint8_t)300.0` to 44, where the GPU's
`cvt` saturated (3e9 -> INT_MAX, NaN -> 0) and nvcc's u8 store kept the low
byte of a 32-bit conversion (audit of session 31). So run_cpu's sequential
meaning said one thing and the GPU did another. `IntConversions` makes every
such store call a helper of the integer's type, the same C text on the host
and (`static __device__ inline`) on the device: truncation toward zero,
saturation to the type's range, NaN to 0, as PTX's `cvt.rzi` does for 32 bits.
"""

from __future__ import annotations

from exo.core.extern import Extern
from exo.core.LoopIR import LoopIR

# The integer types exo stores into, with their ranges.
_RANGES = {"int8_t": (-128, 127), "uint8_t": (0, 255), "uint16_t": (0, 65535), "int32_t": (-2147483648, 2147483647)}


class _FloatToInt(Extern):
    """`float_to_int(x)`: helpers are named per type by `_externs._typed_names` (`_float_to_int_int32_t`)."""

    def __init__(self) -> None:
        super().__init__("float_to_int")

    def globl(self, prim_type: str) -> str:
        low, high = _RANGES[prim_type]
        # Every f16, bf16, f32 and f64 value is a double exactly; the cast runs only within the range.
        return (f"{prim_type} float_to_int(double x) {{ return x != x ? 0 : x <= {low}.0 ? ({prim_type})({low}LL) : "
                f"x >= {high}.0 ? ({prim_type})({high}LL) : ({prim_type})x; }}")

    def compile(self, args: list, prim_type: str) -> str:
        return f"float_to_int({args[0]})"


FLOAT_TO_INT = _FloatToInt()


class IntConversions:
    """Mixin for subclasses of exo's C `Compiler` (before `ExternCalls`, which defines the helpers it calls):
    a float value stored into an integer goes through `FLOAT_TO_INT`."""

    def comp_s(self, s):
        if isinstance(s, (LoopIR.Assign, LoopIR.Reduce)) and _is_int(s.type) and _is_float(s.rhs.type):
            to_int = LoopIR.Extern(FLOAT_TO_INT, [s.rhs], s.type.basetype(), s.rhs.srcinfo)
            s = s.update(rhs=to_int)
        return super().comp_s(s)


def is_int_ctype(ctype: str) -> bool:
    """An integer C type exo stores into (whose conversions from float `FLOAT_TO_INT` defines)."""
    return ctype in _RANGES


def _is_int(typ) -> bool:
    return is_int_ctype(typ.basetype().ctype())


def _is_float(typ) -> bool:
    return isinstance(typ.basetype(), (LoopIR.F16, LoopIR.F32, LoopIR.F64))  # bf16 too (an F16)
