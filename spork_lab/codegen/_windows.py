"""Window aliases (`w = x[i, :]`) in generated C and CUDA.

exo 1.0 types an alias as a const window unless its *source* buffer is
written, so `w = r[:]; w[0] = 1.0` declares a read-only window (and a const
argument) and the write does not compile; and it initialises the alias with
a C compound literal, which nvcc rejects in device code. `WindowAliases`
(mixed into both of our compilers) counts a write through an alias as a write
of its source, initialises aliases as aggregates, which C and C++ both
accept, and names bf16 windows (exo's table of window structs lacks them).
"""

from __future__ import annotations

from exo.backend.LoopIR_compiler import _window_struct
from exo.core.LoopIR import LoopIR, T

from ..core.dtypes import BF16_C_NAME, is_bf16
from ..core.ir import walk_stmts


def with_alias_sources(written, stmts) -> set:
    """The buffers `written` names, plus those written through them: a write to a window alias (`row = y[i, :]`,
    `row[j] = ...`) writes its source, and an alias of an alias the first alias's source too."""
    written = set(written)
    source = {s.name: s.rhs.type.src_buf for s in walk_stmts(stmts) if isinstance(s, LoopIR.WindowStmt)}
    while True:
        through = {source[name] for name in written if name in source} - written
        if not through:
            return written
        written |= through


class WindowAliases:
    """Mixin for subclasses of exo's C `Compiler`."""

    # exo's Compiler sets `non_const` (the buffers its body writes) before it declares the
    # arguments and windows; widening it there makes both agree with writes through aliases.
    @property
    def non_const(self) -> set:
        return self._non_const

    @non_const.setter
    def non_const(self, written) -> None:
        self._non_const = with_alias_sources(written, self.proc.body)

    def get_window_type(self, typ, is_const=None):
        """exo names window structs from a fixed table of its own types; bf16 gets `struct exo_win_Nbf16`."""
        tensor = typ.as_tensor if isinstance(typ, T.Window) else typ.type
        if not is_bf16(tensor):
            return super().get_window_type(typ, is_const)
        if is_const is None:
            is_const = (typ.src_buf if isinstance(typ, T.Window) else typ.name) not in self.non_const
        win = _window_struct("bf16", BF16_C_NAME, len(tensor.shape()), is_const)
        self.window_defns.add(win)
        return win.name

    def comp_s(self, s):
        if not isinstance(s, LoopIR.WindowStmt):
            return super().comp_s(s)
        win = self.get_window_type(s.rhs.type)
        data, strides = self.window_struct_fields(s.rhs)
        name = self.new_varname(s.name, typ=s.rhs.type, mem=self.mems[s.rhs.name])
        self.add_line(f"struct {win} {name} = {{ &{data}, {{ {strides} }} }};")
        return None
