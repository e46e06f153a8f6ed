"""Window aliases (`w = x[i, :]`) in generated C and CUDA.

exo 1.0 types an alias as a const window unless its *source* buffer is
written, so `w = r[:]; w[0] = 1.0` declares a read-only window and the write
does not compile; and it initialises the alias with a C compound literal,
which nvcc rejects in device code. `WindowAliases` (mixed into both of our
compilers) makes a window writable when it or any alias of its buffer is
written, and initialises it as an aggregate, which C and C++ both accept.
"""

from __future__ import annotations

from exo.core.LoopIR import LoopIR, T

from ..core.ir import walk_stmts


class WindowAliases:
    """Mixin for subclasses of exo's C `Compiler`."""

    def get_window_type(self, typ, is_const=None):
        if is_const is None and isinstance(typ, T.Window):
            is_const = typ.src_buf not in self.non_const and typ.src_buf not in self._written_through_alias()
        return super().get_window_type(typ, is_const)

    def _written_through_alias(self) -> set:
        """Buffers some window alias of which is written."""
        if not hasattr(self, "_alias_written"):
            aliases = {s.name: s.rhs.type.src_buf for s in walk_stmts(self.proc.body) if isinstance(s, LoopIR.WindowStmt)}
            self._alias_written = {src for name, src in aliases.items() if name in self.non_const}
        return self._alias_written

    def comp_s(self, s):
        if not isinstance(s, LoopIR.WindowStmt):
            return super().comp_s(s)
        win = self.get_window_type(s.rhs.type)
        data, strides = self.window_struct_fields(s.rhs)
        name = self.new_varname(s.name, typ=s.rhs.type, mem=self.mems[s.rhs.name])
        self.add_line(f"struct {win} {name} = {{ &{data}, {{ {strides} }} }};")
        return None
