"""Host C for the rewritten procs: exo's C backend, driven with our expression printer.

exo's `compile_procs_to_strings` hard-wires its own `Compiler`, whose index
arithmetic can mean something other than the program (see `_c_exprs`). This
module drives the same backend passes and helpers with `HostCompiler`, a
subclass whose expressions print faithfully, and lays the files out as exo
does (header guard, `extern "C"`, helpers, instr globals, memories, externs,
forward declarations, bodies).
"""

from __future__ import annotations

import math

from exo.backend.LoopIR_compiler import (
    Compiler,
    _compile_context_struct,
    _compile_memories,
    find_all_configs,
    find_all_mems,
    find_all_subprocs,
)
from exo.backend.mem_analysis import MemoryAnalysis
from exo.backend.parallel_analysis import ParallelAnalysis
from exo.backend.prec_analysis import PrecisionAnalysis
from exo.backend.win_analysis import WindowAnalysis
from exo.core.LoopIR import LoopIR, T

from ..core.dtypes import BF16, BF16_C_NAME
from ._c_exprs import FLOOR_HELPERS, FaithfulExprs
from ._conversions import IntConversions
from ._externs import ExternCalls, c_definitions
from ._windows import WindowAliases

# exo's header preamble: stdint/stdbool and EXO_ASSUME (which exo's compiler emits for assertions).
_HEADER_PREAMBLE = """
#include <stdint.h>
#include <stdbool.h>

#if defined(__has_builtin)
#  define EXO_HAS_BUILTIN(builtin) __has_builtin(builtin)
#else
#  define EXO_HAS_BUILTIN(builtin) (0)
#endif

#if EXO_HAS_BUILTIN(__builtin_assume)
#  define EXO_ASSUME(expr) __builtin_assume(expr)
#elif EXO_HAS_BUILTIN(__builtin_unreachable)
#  define EXO_ASSUME(expr) ((void)((expr) ? 1 : (__builtin_unreachable(), 1)))
#else
#  define EXO_ASSUME(expr) ((void)(expr))
#endif
"""


class HostCompiler(IntConversions, ExternCalls, FaithfulExprs, WindowAliases, Compiler):
    """exo's C compiler with our expressions and window aliases."""

    def comp_e(self, e, prec=0):
        """f16 arithmetic rounds to f16 at every operation, as CUDA's `__half` operators do: gcc's `_Float16`
        keeps excess precision up to the assignment (`(float)(a * b)` of two f16 was the exact product). A bf16
        value is a float in C expressions, rounded to bf16 at every operation (see `BF16_TYPEDEF_C`)."""
        if isinstance(e, LoopIR.BinOp) and e.type == T.f16 and e.op in _ROUNDED_OPS:
            return f"((_Float16)({super().comp_e(e, 0)}))"
        if not isinstance(e.type, BF16):
            return super().comp_e(e, prec)
        if isinstance(e, LoopIR.Read):
            return f"{BF16_C_NAME}_to_f32({super().comp_e(e)})"
        if isinstance(e, LoopIR.Const):
            return f"{_bf16_value(e.val)!r}f"
        if isinstance(e, LoopIR.BinOp) and e.op in _ROUNDED_OPS:
            return f"{BF16_C_NAME}_round({super().comp_e(e, 0)})"
        return super().comp_e(e, prec)

    def rounded_from_float(self, text: str, base) -> str:
        return f"{BF16_C_NAME}_round({text})" if isinstance(base, BF16) else super().rounded_from_float(text, base)

    def comp_s(self, s):
        """An assignment to bf16 stores the float value rounded; `x += e` is `x = x + e` with e rounded to bf16
        first, as CUDA's `x += (__nv_bfloat16)(e)`."""
        if not (isinstance(s, (LoopIR.Assign, LoopIR.Reduce)) and isinstance(s.type.basetype(), BF16)):
            return super().comp_s(s)
        lhs = super().comp_e(LoopIR.Read(s.name, s.idx, s.type, s.srcinfo))
        if isinstance(s, LoopIR.Assign) and isinstance(s.rhs, LoopIR.Read) and isinstance(s.rhs.type, BF16):
            return self.add_line(self.mems[s.name].write(s, lhs, super().comp_e(s.rhs)))  # a copy keeps the bits
        value = self.comp_e(s.rhs)
        if isinstance(s, LoopIR.Reduce):
            rounded = value if isinstance(s.rhs.type, BF16) else f"{BF16_C_NAME}_to_f32({_to_bf16(value, s.rhs.type)})"
            value = f"{BF16_C_NAME}_to_f32({lhs}) + {rounded}"
        self.add_line(self.mems[s.name].write(s, lhs, _to_bf16(value, s.rhs.type)))


_ROUNDED_OPS = ("+", "-", "*", "/")


def _to_bf16(value: str, value_type) -> str:
    """C of the bf16 nearest an expression of `value_type`, rounded once: an f64 or an integer (which float may
    not hold: 16842753 went to 2^24 through float, then to bf16) goes through the double path."""
    in_float = isinstance(value_type, (LoopIR.F32, LoopIR.F16))  # f16 and bf16 too
    return f"{BF16_C_NAME}_from_{'f32' if in_float else 'f64'}({value})"


def _bf16_value(x: float) -> float:
    """The bf16 nearest x (to nearest even), as a Python float: a bf16 constant's exact value. bf16 keeps 8
    significant bits, and below its smallest normal (2^-126) steps of its subnormals' 2^-133."""
    if x == 0 or not math.isfinite(x):
        return x
    step = max(math.frexp(x)[1] - 8, -133)
    return math.copysign(math.ldexp(round(math.ldexp(x, -step)), step), x)  # -1e-41 is bf16's -0


def host_c_to_strings(procs: list, h_file_name: str, lib: str) -> tuple:
    """(c source, header) of these LoopIR procs and everything they call, as exo lays them out; `lib` (a C
    identifier) names the header guard and the context struct."""
    public = {p.name for p in procs}  # the procs asked for; their callees are static
    everything = sorted(find_all_subprocs(procs), key=lambda p: p.name)
    ctxt_name, ctxt_def = _compile_context_struct(find_all_configs(everything), lib)
    structs, helpers, externs = set(), set(), set()
    public_decls, private_decls, bodies, instr_globals = [], [], [], []
    seen = set()
    for p in everything:
        if p.name in seen:
            raise TypeError(f"multiple procs named {p.name}")
        seen.add(p.name)
        if p.instr is not None:
            args = ",".join(str(a.name) for a in p.args)
            bodies += ["", "/* relying on the following instruction...", f"{p.name}({args})", p.instr.c_instr, "*/"]
            if p.instr.c_global:
                instr_globals.append(p.instr.c_global)
            continue
        p = _analysed(p)
        comp = HostCompiler(p, ctxt_name, is_public_decl=p.name in public)
        decl, body = comp.comp_top()
        structs |= comp.struct_defns()
        helpers |= comp.needed_helpers()
        externs |= comp.extern_uses
        (public_decls if p.name in public else private_decls).append(decl)
        bodies.append(body)
    struct_text = [s.definition for s in sorted(structs, key=lambda s: s.name)]
    header_body = "\n".join([_HEADER_PREAMBLE, *ctxt_def, *struct_text, *public_decls])
    guard = f"{lib}_H".upper()
    header = "\n".join(
        [
            "#pragma once",
            f"#ifndef {guard}",
            f"#define {guard}",
            "",
            "#ifdef __cplusplus",
            'extern "C" {',
            "#endif",
            header_body,
            "#ifdef __cplusplus",
            "}",
            "#endif",
            f"#endif  // {guard}",
            "",
        ]
    )
    sections = [
        [FLOOR_HELPERS[h].format(q="static") for h in sorted(helpers)],
        instr_globals,
        _compile_memories(find_all_mems(everything)),
        c_definitions(externs),
        private_decls,
        bodies,
    ]
    source = f'#include "{h_file_name}"\n\n' + "\n".join("\n".join(s) for s in sections if s) + "\n"
    return source, header


def _analysed(p: LoopIR.proc) -> LoopIR.proc:
    """exo's backend passes, in exo's order."""
    p = ParallelAnalysis().run(p)
    p = PrecisionAnalysis().run(p)
    p = WindowAnalysis().apply_proc(p)
    return MemoryAnalysis().run(p)
