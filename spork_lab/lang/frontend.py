"""Front end: Exo-GPU source -> exo Procedure with loop modes attached.

Three steps, in this order:
1. a Python-AST pre-pass rewrites the Exo-GPU syntax into syntax exo parses
   (`cuda_threads(...)` -> `seq(lo, hi)`, `with X:` -> `for _with in seq(0, 1)`,
   sync statements -> calls of generated procs, `barrier` -> a carrier type),
   recording each loop's mode in a side table keyed by its source position;
2. exo's own Parser and TypeChecker run on the rewritten tree, with the user's
   globals and locals plus the generated procs;
3. the loop modes are attached to the typed LoopIR, then exo's bounds and
   aliasing checks run as they do for any proc (the bounds check reports
   errors inside callees at the call, and a buffer passed for two arguments
   is refused at the call before exo's aliasing check: lang/bounds.py).
Keyword arguments, `>>` and `~N` are evaluated in Python; loop bounds and
barrier indices stay Exo expressions.
"""

from __future__ import annotations

import ast as pyast
import copy
import difflib
import inspect
import re
import textwrap
from collections import ChainMap
from typing import Callable, Optional

from exo.API import Procedure
from exo.core.extern import Extern
from exo.core.LoopIR import UAST, LoopIR, T
from exo.core.memory import Memory
from exo.core.prelude import SrcInfo
from exo.frontend.pyparser import ParseError, Parser
from exo.frontend.typecheck import TypeChecker
from exo.libs import externs as exo_externs
from exo.rewrite.new_eff import Check_Aliasing

from ..core.blocks import BLOCK_CONTEXTS, BlockContext
from ..core.coll import CollUnit
from .bounds import check_arity, check_bounds, check_distinct_buffers, check_ranks
from ..core.dtypes import UBF16, bf16
from ..core.instrs import InstrTemplate, instr_info_by_name
from ..core.loop_modes import LoopModeSyntax, WithBlock
from ..core.sync_stmts import BarrierMemory, SyncSpec, SyncSyntax, sync_proc, trailing_proc
from ..core.tensor_maps import TensorMapSpec, register_tensor_map
from ..core.timelines import SYNC_TLS, InstrTl, SyncTl
from ..errors import SporkSyntaxError, SporkTypeError, from_exo, user_facing, user_frame

WITH_ITER = "_with"


def parse_function(func: Callable, caller_locals: dict, instr: Optional[tuple] = None) -> Procedure:
    """Parse a decorated Python function as an Exo-GPU proc (or instr)."""
    rawsrc = inspect.getsource(func)
    src = textwrap.dedent(rawsrc)
    n_dedent = len(re.match("^(.*)", rawsrc).group()) - len(re.match("^(.*)", src).group())
    _, first_line = inspect.getsourcelines(func)
    return parse_source(
        src,
        filename=inspect.getsourcefile(func) or "<unknown>",
        first_line=first_line,
        col_offset=n_dedent,
        func_globals=func.__globals__,
        func_locals=caller_locals,
        instr=instr,
    )


@user_facing
def parse_source(
    src: str,
    *,
    filename: str = "<string>",
    first_line: int = 1,
    col_offset: int = 0,
    func_globals: Optional[dict] = None,
    func_locals: Optional[dict] = None,
    instr: Optional[tuple] = None,
) -> Procedure:
    """Parse the text of one `def` (e.g. the printout of a proc) as an Exo-GPU proc; its lines are numbered from
    `first_line` of `filename`, so errors (exo's parse, type and bounds errors among them) name the user's line.
    `col_offset`: the def's indentation in that file; `instr`: @instr's C templates."""
    __tracebackhide__ = True
    if not isinstance(src, str):
        raise SporkTypeError(f"parse_source takes the text of one def, not a {type(src).__name__}"
                             + ("; for a proc's printout write parse_source(str(p))" if isinstance(src, Procedure) else ""),
                             user_frame())
    try:
        return _parse_text(src, filename, first_line, col_offset, func_globals, func_locals, instr)
    except (ParseError, TypeError) as e:
        if filename not in str(e):
            raise  # not about the text: our bug or exo's, keep the traceback
        error = from_exo(e, filename)
    raise error


def _parse_text(src: str, filename: str, first_line: int, col_offset: int, func_globals: Optional[dict],
                func_locals: Optional[dict], instr: Optional[tuple]) -> Procedure:
    """The parse itself; parse_source (which @proc and @instr call too) turns exo's errors into SporkErrors."""
    func_globals = func_globals if func_globals is not None else default_namespace()
    func_locals = dict(func_locals or {})
    try:
        module = pyast.parse(src)
    except SyntaxError as e:
        raise SporkSyntaxError(f"the text is not Python: {e.msg}", SrcInfo(filename, first_line + (e.lineno or 1) - 1))
    if len(module.body) != 1 or not isinstance(module.body[0], pyast.FunctionDef):
        raise SporkSyntaxError("a proc's text is exactly one function definition, `def name(...):` (as a proc "
                               "prints)", SrcInfo(filename, first_line))
    fdef = module.body[0]

    def getsrcinfo(node) -> SrcInfo:
        if not hasattr(node, "lineno"):  # a def's `arguments` (a default value, *args): at the def's line
            node = fdef
        end = getattr(node, "end_lineno", None)
        end_col = getattr(node, "end_col_offset", None)
        return SrcInfo(
            filename=filename,
            lineno=node.lineno + first_line - 1,
            col_offset=node.col_offset + col_offset,
            end_lineno=None if end is None else end + first_line - 1,
            end_col_offset=None if end_col is None else end_col + col_offset,
        )

    rewriter = _GpuSyntaxRewriter(ChainMap(func_locals, func_globals), getsrcinfo)
    rewriter.rewrite_function(fdef)
    parser = Parser(
        fdef,
        getsrcinfo,
        func_globals=func_globals,
        srclocals=ChainMap(rewriter.generated_procs, func_locals),
        instr=instr,
        as_func=True,
    )
    uast = parser.result()
    check_arity(uast.body)
    ir = _TypeChecker(_mark_bf16(uast, rewriter.bf16_decls)).get_loopir()
    ir = ir.update(body=_attach_modes(ir.body, rewriter.modes))
    _register_tensor_maps(ir.body, rewriter.tensor_maps)
    check_bounds(ir)
    check_distinct_buffers(ir)
    Check_Aliasing(ir)
    return Procedure(ir)


def _as_bf16(typ):
    if isinstance(typ, UAST.Tensor):
        return typ.update(type=UBF16())
    return UBF16()


def _mark_bf16(uast: UAST.proc, decls: set) -> UAST.proc:
    """The parsed proc with the declarations the pre-pass saw spelled `bf16` typed UBF16 (exo parsed them as f16)."""
    if not decls:
        return uast

    def stmts(body):
        out = []
        for s in body:
            if isinstance(s, UAST.Alloc) and (str(s.name), s.srcinfo.lineno, s.srcinfo.col_offset) in decls:
                s = s.update(type=_as_bf16(s.type))
            elif isinstance(s, (UAST.For, UAST.If)):
                s = s.update(body=stmts(s.body), **({"orelse": stmts(s.orelse)} if isinstance(s, UAST.If) else {}))
            out.append(s)
        return out

    args = [a.update(type=_as_bf16(a.type)) if (str(a.name), None, None) in decls else a for a in uast.args]
    return uast.update(args=args, body=stmts(uast.body))


_PLATFORM_NAMES: dict = {}


def register_platform(names: dict) -> None:
    """A platform module adds the names `from <platform> import *` gives it (called when it is imported).

    Printed procs use these names, so `parse_source` finds them without the
    text importing anything; the front end never lists platforms itself.
    """
    _PLATFORM_NAMES.update(names)


def default_namespace() -> dict:
    """The names of every platform imported so far (spork_lab always imports spork_lab.platforms.cuda)."""
    return dict(_PLATFORM_NAMES)


def _position(srcinfo: SrcInfo) -> tuple:
    return (srcinfo.lineno, srcinfo.col_offset)


def _attach_modes(stmts: list, modes: dict) -> list:
    out = []
    for s in stmts:
        if isinstance(s, LoopIR.For):
            mode = modes.get(_position(s.srcinfo), s.loop_mode)
            s = s.update(body=_attach_modes(s.body, modes), loop_mode=mode)
        elif isinstance(s, LoopIR.If):
            s = s.update(body=_attach_modes(s.body, modes), orelse=_attach_modes(s.orelse, modes))
        out.append(s)
    return out


class _TypeChecker(TypeChecker):
    """exo's type checker, plus bf16 (spork_lab.core.dtypes), able to window a window statement's variable
    (`T[i:j, k:l]` of `T = A[...]`), and saying a call argument of another rank in our words (`check_ranks`).

    exo 1.0 types a window statement's variable as a `T.Window`, which its
    WindowExpr rule cannot window again; tensor maps are windowed in device
    code, so the rule sees the variable as the window tensor it stands for.
    """

    def check_t(self, typ):
        if isinstance(typ, UBF16):
            return bf16
        return super().check_t(typ)

    def check_single_stmt(self, stmt):
        typed = super().check_single_stmt(stmt)
        if isinstance(stmt, UAST.Call):
            check_ranks(typed[0])
        return typed

    def err(self, node, msg):
        """exo's errors, with what its "expected scalar type" met: an index or size in data arithmetic."""
        if msg == "expected scalar type" and getattr(node, "type", None) in (T.index, T.size, T.int):
            msg += (f": `{node}` is an index (a size, an iterator, or arithmetic on them), which exo does not "
                    "convert to a number in data arithmetic; pass the value in a tensor instead")
        super().err(node, msg)

    def check_e(self, e, is_index=False):
        typ = self.env.get(e.name) if isinstance(e, UAST.WindowExpr) else None
        if not isinstance(typ, T.Window):
            return super().check_e(e, is_index)
        self.env[e.name] = typ.as_tensor
        try:
            return super().check_e(e, is_index)
        finally:
            self.env[e.name] = typ


def _register_tensor_maps(stmts: list, specs: dict) -> None:
    """Register the window statement at each position the pre-pass saw `... @ Sm90_tensorMap(...)`."""
    if not specs:
        return
    for s in stmts:
        if isinstance(s, LoopIR.WindowStmt) and _position(s.srcinfo) in specs:
            register_tensor_map(s.name, specs[_position(s.srcinfo)])
        elif isinstance(s, LoopIR.For):
            _register_tensor_maps(s.body, specs)
        elif isinstance(s, LoopIR.If):
            _register_tensor_maps(s.body, specs)
            _register_tensor_maps(s.orelse, specs)


def _without_self(message: str) -> str:
    """A block class's __init__ TypeError as the user called it: no `X.__init__()`, and counts without `self`
    (`CudaAsync(a, b)` "takes 2 positional arguments but 3 were given")."""
    counts = re.fullmatch(r"[\w.]*__init__[(][)] takes (\d+) positional arguments? but (\d+) (?:were|was) given", message)
    if counts:
        takes, given = int(counts[1]) - 1, int(counts[2]) - 1
        return f"takes {takes} positional argument{'s' * (takes != 1)}, got {given}"
    return re.sub(r"^[\w.]*__init__[(][)] ", "", message)


_EXTERNS = sorted(name for name, value in vars(exo_externs).items() if isinstance(value, Extern))  # what exo has
_ELEMENT_TYPES = ("R", "f16", "bf16", "f32", "f64", "i8", "ui8", "ui16", "i32")  # exo's parser's, and bf16


def _suggest(name: str, candidates) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


class _GpuSyntaxRewriter:
    """The pre-pass: rewrites Exo-GPU statements in place and records their meaning."""

    def __init__(self, env: ChainMap, getsrcinfo: Callable):
        self.env = env
        self.getsrcinfo = getsrcinfo
        self.modes: dict = {}  # source position of a For -> loop mode
        self.barriers: dict = {}  # barrier name -> (memory, number of indices)
        self.barrier_dims: dict = {}  # barrier name -> its dimensions (ints, None where not constant)
        self.tensor_maps: dict = {}  # source position of a window statement -> TensorMapSpec
        self.generated_procs: dict = {}  # name -> Procedure of a sync statement
        self.bf16_decls: set = set()  # (name, line, col) of allocations, (name, None, None) of arguments typed bf16
        self.variables: set = set()  # the proc's arguments, iterators and allocations (no compile-time values)

    # -- helpers ------------------------------------------------------------

    def err(self, node, message: str):
        raise SporkSyntaxError(message, self.getsrcinfo(node))

    def eval(self, node, what: str):
        """Evaluate a compile-time Python expression in the proc's environment."""
        code = compile(pyast.fix_missing_locations(pyast.Expression(copy.deepcopy(node))), "<exo-gpu>", "eval")
        try:
            return eval(code, {"__builtins__": __builtins__}, self.env)
        except NameError as e:
            raise _Unknown(e.name) from None
        except TypeError as e:
            callee = self.lookup(node.func) if isinstance(node, pyast.Call) else None
            usage = f"; write {callee.usage()}" if hasattr(callee, "usage") else ""
            reason = _without_self(getattr(e, "message", str(e)))  # a block's SporkTypeError names its own place
            prefix = "" if reason.startswith(what) else f"{what}: "  # the block's own check names it already
            self.err(node, f"{prefix}{reason}{usage}")
        except Exception as e:  # noqa: BLE001 -- any failure of user code is the user's error
            self.err(node, f"{what}: evaluating `{pyast.unparse(node)}` raised {type(e).__name__}: {e}")

    def keywords(self, call: pyast.Call, owner: str) -> dict:
        """Evaluate the compile-time keyword arguments of a call such as `cuda_threads(..., unit=U)`."""
        kwargs = {}
        for kw in call.keywords:
            if kw.arg is None:
                self.err(kw.value, f"{owner}: spell out keyword arguments, no **")
            try:
                kwargs[kw.arg] = self.eval(kw.value, f"{owner}({kw.arg}=...)")
            except _Unknown as e:
                if e.name in self.variables:
                    self.err(kw.value, f"{owner}({kw.arg}=...) takes a value known when the proc is compiled, and "
                                       f"'{e.name}' is a variable of the proc: write a number (or a Python name "
                                       "defined outside the proc)")
                self.err(kw.value, f"{owner}({kw.arg}=...): unknown name '{e.name}'{_suggest(e.name, self.env)}")
        return kwargs

    def lookup(self, node) -> object:
        """The Python value a Name refers to, or None if it names nothing."""
        if isinstance(node, pyast.Name):
            return self.env.get(node.id)
        return None

    # -- statements ---------------------------------------------------------

    def rewrite_function(self, fdef: pyast.FunctionDef) -> None:
        targets = [t for n in pyast.walk(fdef) for t in (
            [n.target] if isinstance(n, (pyast.For, pyast.AnnAssign)) else n.targets if isinstance(n, pyast.Assign) else [])]
        self.variables = {a.arg for a in fdef.args.args} | {t.id for t in targets if isinstance(t, pyast.Name)}
        for a in fdef.args.args:
            if a.annotation is not None and self._is_barrier_annotation(a.annotation):
                self.err(a, f"barrier '{a.arg}' cannot be a proc argument: allocate it inside the proc, "
                            f"`{a.arg}: barrier @ CudaMbarrier`")
            if a.annotation is not None:
                self.check_element_type(a.arg, a.annotation)
                self.check_data_memory(a.arg, a.annotation)
            if a.annotation is not None and self.bf16_to_f16(a.annotation):
                self.bf16_decls.add((a.arg, None, None))
        fdef.body = self.block(fdef.body)

    def check_element_type(self, name: str, annotation) -> None:
        """`x: f23[n]` names its element type as exo's parser reads it (`R`, `f32`, ..., and our `bf16`); exo would
        say only "expected tensor type to be of the form 'R[...]', 'f32[...]', etc."."""
        typ = annotation.left if isinstance(annotation, pyast.BinOp) else annotation
        base = typ.value if isinstance(typ, pyast.Subscript) else None
        if isinstance(base, pyast.List) and len(base.elts) == 1:  # an instr's window parameter: [f32][4]
            base = base.elts[0]
        if isinstance(base, pyast.Name) and base.id not in _ELEMENT_TYPES:
            self.err(base, f"unknown element type '{base.id}' for '{name}'{_suggest(base.id, _ELEMENT_TYPES)}; the "
                           f"element types are {', '.join(_ELEMENT_TYPES)}")

    def check_data_memory(self, name: str, annotation) -> None:
        """The memory of a data tensor, evaluated here so that a memory's own check (`Sm90_SmemSwizzled(100)`)
        or a barrier memory names the user's line; exo would evaluate it with its parser's frames around."""
        if not (isinstance(annotation, pyast.BinOp) and isinstance(annotation.op, pyast.MatMult)):
            return
        written = pyast.unparse(annotation.right)
        try:
            mem = self.eval(annotation.right, "memory")
        except _Unknown as e:
            memories = [n for n, v in self.env.items() if isinstance(v, type) and issubclass(v, Memory)]
            self.err(annotation.right, f"unknown memory '{e.name}' for '{name}'{_suggest(e.name, memories)}")
        if isinstance(mem, type) and issubclass(mem, BarrierMemory):
            self.err(annotation.right, f"{mem.__name__} holds barriers, not data: declare a barrier as "
                                       f"`{name}: barrier @ {mem.__name__}`, or put '{name}' in a data memory "
                                       "such as CudaSmemLinear")
        if not (isinstance(mem, type) and issubclass(mem, Memory)):
            what = ("a collective unit, which says who runs code" if isinstance(mem, CollUnit)
                    else "a function: call it with its parameters, as in Sm90_SmemSwizzled(128)" if callable(mem)
                    else f"a {type(mem).__name__}")
            self.err(annotation.right, f"'{name}' @ {written}: {written} is not a memory but {what} (memories are "
                                       "CudaGmemLinear, CudaSmemLinear, CudaRmem, Sm90_SmemSwizzled(128), ...)")

    @staticmethod
    def bf16_to_f16(annotation) -> bool:
        """Respell `bf16` as `f16` in a type annotation (exo's parser knows only f16); whether it did."""
        found = False
        for n in pyast.walk(annotation):
            if isinstance(n, pyast.Name) and n.id == "bf16":
                n.id, found = "f16", True
        return found

    def block(self, stmts: list) -> list:
        return [self.stmt(s) for s in stmts]

    def stmt(self, s):
        if isinstance(s, pyast.AnnAssign) and self._is_barrier_annotation(s.annotation):
            return self.barrier_decl(s)
        if isinstance(s, pyast.AnnAssign) and isinstance(s.target, pyast.Name):
            self.check_element_type(s.target.id, s.annotation)
            self.check_data_memory(s.target.id, s.annotation)
        if isinstance(s, pyast.AnnAssign) and isinstance(s.target, pyast.Name) and self.bf16_to_f16(s.annotation):
            info = self.getsrcinfo(s)
            self.bf16_decls.add((s.target.id, info.lineno, info.col_offset))
        if isinstance(s, pyast.For):
            return self.for_loop(s)
        if isinstance(s, pyast.With):
            return self.with_block(s)
        if isinstance(s, pyast.If):
            self.check_value_calls(s.test)
            self.check_no_barrier_data(s.test)
            s.body = self.block(s.body)
            s.orelse = self.block(s.orelse)
            return s
        if isinstance(s, pyast.Expr) and isinstance(s.value, pyast.BinOp) and isinstance(s.value.op, pyast.RShift):
            if isinstance(s.value.left, pyast.Call) and not isinstance(self.lookup(s.value.left.func), SyncSyntax):
                return self.trailing_call(s, s.value)
            return self.arrive(s, s.value)
        if isinstance(s, pyast.Assign) and isinstance(s.value, pyast.BinOp) and isinstance(s.value.op, pyast.MatMult):
            return self.tensor_map(s)
        if isinstance(s, (pyast.Assign, pyast.AugAssign, pyast.AnnAssign)) and s.value is not None:
            self.check_value_calls(s.value)
        if isinstance(s, pyast.Expr) and isinstance(s.value, pyast.Call):
            func = s.value.func
            if isinstance(func, pyast.Name) and func.id not in self.env:
                known = [n for n, v in self.env.items() if isinstance(v, (Procedure, InstrTemplate))]
                self.err(func, f"unknown proc or instr '{func.id}'{_suggest(func.id, known)}: define or import it "
                               "before the proc that calls it")
            syntax = self.lookup(func)
            if isinstance(syntax, SyncSyntax):
                return self.sync_call(s, s.value, syntax)
            if isinstance(syntax, InstrTemplate):
                return self.template_call(s.value, syntax)
        self.check_no_barrier_data(s)
        return s

    def check_value_calls(self, node) -> None:
        """A value calls only externs. Sync statements, instrs and procs are statements and return nothing; used as
        a value, exo said only "expected called object to be a extern function". A name defined nowhere (C's
        `sqrtf`) was a NameError from inside exo's parser."""
        for n in pyast.walk(node):
            if not isinstance(n, pyast.Call):
                continue
            if isinstance(self.lookup(n.func), (SyncSyntax, InstrTemplate, Procedure)):
                self.err(n, f"`{pyast.unparse(n)}` is a statement and gives no value: write it on a line of its own")
            name = n.func.id if isinstance(n.func, pyast.Name) else None
            if name is not None and name != "stride" and name not in self.env:  # stride(x, 0): exo's own
                if name in _EXTERNS:
                    self.err(n.func, f"{name} is one of exo's externs, not imported here: add `from exo.libs.externs "
                                     f"import {name}` to the file")
                self.err(n.func, f"unknown function '{name}'{_suggest(name, _EXTERNS)}: an expression calls exo's "
                                 f"externs ({', '.join(_EXTERNS)}); import them, as in "
                                 "`from exo.libs.externs import sqrt`")

    def check_no_barrier_data(self, node) -> None:
        for n in pyast.walk(node):
            if isinstance(n, pyast.Name) and n.id in self.barriers:
                self.err(
                    n,
                    f"'{n.id}' is a barrier, not data: use it only in sync statements, "
                    f"e.g. `Arrive(cuda_in_order, 1) >> {n.id}` or `Await({n.id}, cuda_in_order, 0)`",
                )

    # -- barriers -----------------------------------------------------------

    @staticmethod
    def _barrier_type_node(annotation):
        typ = annotation.left if isinstance(annotation, pyast.BinOp) else annotation
        base = typ.value if isinstance(typ, pyast.Subscript) else typ
        return typ, base

    def _is_barrier_annotation(self, annotation) -> bool:
        _, base = self._barrier_type_node(annotation)
        return isinstance(base, pyast.Name) and base.id == "barrier"

    def barrier_decl(self, s: pyast.AnnAssign):
        name = s.target.id if isinstance(s.target, pyast.Name) else None
        if name is None or s.value is not None:
            self.err(s, "declare a barrier as `name: barrier @ CudaMbarrier` (or `barrier[2, 4] @ ...`)")
        if not (isinstance(s.annotation, pyast.BinOp) and isinstance(s.annotation.op, pyast.MatMult)):
            self.err(s, f"barrier '{name}' needs a memory: write `{name}: barrier @ CudaMbarrier` "
                        "(or CudaCommitGroup, CudaEvent)")
        try:
            mem = self.eval(s.annotation.right, "barrier memory")
        except _Unknown as e:
            self.err(s.annotation.right, f"unknown memory '{e.name}' for barrier '{name}'")
        if not (isinstance(mem, type) and issubclass(mem, BarrierMemory)):
            self.err(s.annotation.right, f"barrier '{name}' needs a barrier memory "
                                         f"(CudaMbarrier, CudaCommitGroup, CudaEvent), not {getattr(mem, '__name__', mem)}")
        typ, _ = self._barrier_type_node(s.annotation)
        ndim = 0
        if isinstance(typ, pyast.Subscript):
            dims = typ.slice.elts if isinstance(typ.slice, pyast.Tuple) else [typ.slice]
            ndim = len(dims)
            self.barrier_dims[name] = [self._const_int(d) for d in dims]
            typ.value = pyast.copy_location(pyast.Name(id="ui8", ctx=pyast.Load()), typ.value)
        else:
            s.annotation.left = pyast.copy_location(pyast.Name(id="ui8", ctx=pyast.Load()), typ)
        self.barriers[name] = (mem, ndim)
        return s

    def _const_int(self, node):
        """The value of a compile-time int expression, or None."""
        try:
            v = self.eval(node, "barrier dimension")
        except (_Unknown, SporkSyntaxError):
            return None
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    def barrier_arg(self, node, kind: str, slices: bool = False):
        """Rewrite `bar[i, j]` to the window `bar[i:i+1, j:j+1]` a sync proc takes."""
        base = node.value if isinstance(node, pyast.Subscript) else node
        if not isinstance(base, pyast.Name):
            self.err(node, f"{kind} needs a barrier variable here, e.g. `bar` or `bar[i]`, not `{pyast.unparse(node)}`")
        if base.id not in self.barriers:
            self.err(node, f"'{base.id}' is not a barrier: declare it as `{base.id}: barrier @ CudaMbarrier` "
                           f"(or CudaCommitGroup, CudaEvent) before using it in {kind}")
        mem, ndim = self.barriers[base.id]
        idx = []
        if isinstance(node, pyast.Subscript):
            idx = node.slice.elts if isinstance(node.slice, pyast.Tuple) else [node.slice]
        if any(isinstance(i, pyast.Slice) for i in idx) and not slices:
            self.err(node, f"barrier '{base.id}' takes point indices, e.g. `{base.id}[i]`, not slices")
        if len(idx) != ndim:
            self.err(node, f"barrier '{base.id}' has {ndim} indices, but `{pyast.unparse(node)}` gives {len(idx)}")
        if ndim == 0:
            return (pyast.Name(id=base.id, ctx=pyast.Load()), mem, ndim) + (((),) if slices else ())
        window, shape = [], []
        for i, dim in zip(idx, self.barrier_dims.get(base.id, [None] * ndim)):
            if isinstance(i, pyast.Slice):
                if i.step is not None:
                    self.err(node, f"barrier '{base.id}': slices of barriers take no step")
                lo = 0 if i.lower is None else self._const_int(i.lower)
                hi = dim if i.upper is None else self._const_int(i.upper)
                if lo is None or hi is None or not 0 <= lo < hi:
                    self.err(node, f"barrier '{base.id}': a slice of barriers needs constant bounds, e.g. `{base.id}[:]` "
                                   "over a dimension of constant size")
                window.append(pyast.Slice(lower=pyast.Constant(lo), upper=pyast.Constant(hi)))
                shape.append(hi - lo)
            else:
                window.append(pyast.Slice(lower=copy.deepcopy(i),
                                          upper=pyast.BinOp(left=copy.deepcopy(i), op=pyast.Add(), right=pyast.Constant(1))))
                shape.append(1)
        arg = pyast.Subscript(value=pyast.Name(id=base.id, ctx=pyast.Load()), slice=pyast.Tuple(elts=window, ctx=pyast.Load()), ctx=pyast.Load())
        return (pyast.copy_location(arg, node), mem, ndim) + ((tuple(shape),) if slices else ())

    # -- loops and blocks ---------------------------------------------------

    def for_loop(self, s: pyast.For):
        it = s.iter
        if not isinstance(it, pyast.Call) or not isinstance(it.func, pyast.Name):
            self.err(it, "a loop needs a loop mode: write `seq(lo, hi)`, `cuda_tasks(lo, hi)` or "
                         "`cuda_threads(0, n, unit=...)`")
        if it.func.id not in ("seq", "par"):
            try:
                syntax = self.eval(it.func, "loop mode")
            except _Unknown:
                syntax = None
            if not isinstance(syntax, LoopModeSyntax):
                known = ("seq", "par", "cuda_tasks", "cuda_threads")
                self.err(it.func, f"unknown loop mode '{it.func.id}'{_suggest(it.func.id, known)}: "
                                  f"use one of {', '.join(known)} (from spork_lab.platforms.cuda import *)")
            if len(it.args) != 2:
                self.err(it, f"{syntax.name} takes two bounds: write `{syntax.name}(lo, hi"
                             f"{', unit=...' if syntax.keywords else ''})`")
            kwargs = self.keywords(it, syntax.name)
            try:
                mode = syntax(**kwargs)
            except TypeError as e:
                self.err(it, getattr(e, "message", str(e)))
            s.iter = pyast.copy_location(
                pyast.Call(func=pyast.Name(id="seq", ctx=pyast.Load()), args=it.args, keywords=[]), it
            )
            pyast.fix_missing_locations(s.iter)
            self.modes[_position(self.getsrcinfo(s))] = mode
        self.check_no_barrier_data(s.iter)
        s.body = self.block(s.body)
        return s

    def with_block(self, s: pyast.With):
        if len(s.items) != 1:
            self.err(s, "one context per `with`: nest the blocks instead, e.g. "
                        "`with CudaDeviceFunction(...):` then `with CudaAsync(...):` inside it")
        item = s.items[0]
        if item.optional_vars is not None:
            self.err(item.optional_vars, "`with ... as name` is not allowed in a proc: drop the `as` part")
        ctx_node = item.context_expr
        what = pyast.unparse(ctx_node.func if isinstance(ctx_node, pyast.Call) else ctx_node)
        try:
            ctx = self.eval(ctx_node, what)
        except _Unknown as e:
            known = [c.__name__ for c in BLOCK_CONTEXTS]
            if e.name != what:
                self.err(ctx_node, f"`{pyast.unparse(ctx_node)}`: unknown name '{e.name}'; a block's arguments are "
                                   "compile-time values (ints, or Python names defined before the proc), not the "
                                   "proc's sizes or variables")
            self.err(ctx_node, f"unknown context manager '{e.name}'{_suggest(e.name, known)}: "
                               f"use one of {', '.join(known)}")
        if isinstance(ctx, type) and issubclass(ctx, BlockContext):
            self.err(ctx_node, f"write `with {ctx.__name__}(...):` with its arguments, not the bare class")
        if not isinstance(ctx, BlockContext):
            known = ", ".join(c.__name__ for c in BLOCK_CONTEXTS)
            self.err(ctx_node, f"unknown context manager `{pyast.unparse(ctx_node)}`: use one of {known}")
        loop = pyast.For(
            target=pyast.Name(id=WITH_ITER, ctx=pyast.Store()),
            iter=pyast.Call(func=pyast.Name(id="seq", ctx=pyast.Load()), args=[pyast.Constant(0), pyast.Constant(1)], keywords=[]),
            body=self.block(s.body),
            orelse=[],
        )
        pyast.copy_location(loop, s)
        pyast.fix_missing_locations(loop)
        self.modes[_position(self.getsrcinfo(loop))] = WithBlock(ctx)
        return loop

    def template_call(self, call: pyast.Call, template: InstrTemplate):
        """`Sm80_cp_async_f32(dst, src, size=16)` -> a call of the concrete instr for size=16."""
        operand = next((kw for kw in call.keywords if kw.arg is not None and kw.arg not in template.defaults), None)
        if operand is not None:  # `dst=s[...]` would be evaluated as a compile-time keyword: a misleading NameError
            self.err(operand.value, f"{template.name} takes its operands positionally, and only "
                                    f"{', '.join(f'{k}=...' for k in template.defaults)} by keyword, not {operand.arg}=...")
        kwargs = self.keywords(call, template.name)
        try:
            concrete = template.concrete(**kwargs)
        except (TypeError, ValueError) as e:
            self.err(call, str(e))
        self.generated_procs[str(concrete.name())] = concrete
        call.func = pyast.copy_location(pyast.Name(id=str(concrete.name()), ctx=pyast.Load()), call.func)
        call.keywords = []
        for a in call.args:
            self.check_no_barrier_data(a)
        return pyast.Expr(value=call, lineno=call.lineno, col_offset=call.col_offset,
                          end_lineno=call.end_lineno, end_col_offset=call.end_col_offset)

    def trailing_call(self, s: pyast.Expr, binop: pyast.BinOp):
        """`instr(args) >> bar[...]`: an instr that completes on a barrier (a TMA load on an mbarrier)."""
        call = binop.left
        target = self.lookup(call.func)
        if isinstance(target, InstrTemplate):
            try:
                concrete = target.concrete(**self.keywords(call, target.name))
            except (TypeError, ValueError) as e:
                self.err(call, str(e))
            user_name = target.name
        elif hasattr(target, "_loopir_proc") and not call.keywords:
            concrete, user_name = target, str(target.name())
        else:
            self.err(s, f"`>>` only follows Arrive(...) or ReverseArrive(...) (or an instr that completes on a barrier, "
                        f"a TMA load), not `{pyast.unparse(call)}`")
        info = instr_info_by_name(str(concrete.name()))
        if info is None or not info.trailing_barrier:
            self.err(s, f"{user_name} does not complete on a barrier, so it takes no `>> bar[...]`; only TMA loads "
                        "(Sm90_copy_tensor_to_smem_*, Sm90_multicast_copy_tensor_to_smem_*) do")
        bar, mem, _, shape = self.barrier_arg(binop.right, f"{user_name}(...) >>", slices=True)
        if not mem.takes_trailing_loads:
            self.err(binop.right, f"{user_name} completes on a barrier @ CudaMbarrier, not @ {mem.name()}")
        proc = trailing_proc(concrete, mem, shape)
        self.generated_procs[str(proc.name())] = proc
        for a in call.args:
            self.check_no_barrier_data(a)
        new_call = pyast.Call(func=pyast.Name(id=str(proc.name()), ctx=pyast.Load()), args=[*call.args, bar], keywords=[])
        new = pyast.copy_location(pyast.Expr(value=pyast.copy_location(new_call, s)), s)
        return pyast.fix_missing_locations(new)

    def tensor_map(self, s: pyast.Assign):
        """`T = A[...] @ Sm90_tensorMap(swizzle, *box)`: the window statement `T = A[...]`, remembered as a tensor map."""
        try:
            spec = self.eval(s.value.right, "tensor map")
        except _Unknown as e:
            self.err(s.value.right, f"unknown name '{e.name}'{_suggest(e.name, self.env)}; a tensor map is written "
                                    "`T = A[...] @ Sm90_tensorMap(swizzle, *box)` (from spork_lab.platforms.Sm90 import *)")
        if not isinstance(spec, TensorMapSpec):
            self.err(s.value.right, "`T = A[...] @ X` makes a tensor map: X must be Sm90_tensorMap(swizzle, *box)")
        if len(s.targets) != 1 or not isinstance(s.targets[0], pyast.Name) or not isinstance(s.value.left, pyast.Subscript):
            self.err(s, "a tensor map is written `T = A[...] @ Sm90_tensorMap(swizzle, *box)`, with a window of a tensor")
        self.check_no_barrier_data(s.value.left)
        self.tensor_maps[_position(self.getsrcinfo(s))] = spec
        new = pyast.copy_location(pyast.Assign(targets=s.targets, value=s.value.left), s)
        return pyast.fix_missing_locations(new)

    # -- sync statements ----------------------------------------------------

    def sync_tl(self, node, kind: str, which: str) -> SyncTl:
        try:
            tl = self.eval(node, f"{kind} {which}")
        except _Unknown as e:
            self.err(node, f"unknown sync-tl '{e.name}'{_suggest(e.name, SYNC_TLS)} in {kind}: "
                           f"known sync-tls are {', '.join(SYNC_TLS)}")
        if isinstance(tl, InstrTl):
            self.err(node, f"{kind} takes sync-tls, and {tl.name} is an instr-tl: write {tl.sync_tl_name}")
        if not isinstance(tl, SyncTl):
            self.err(node, f"{kind}'s {which} must be a sync-tl such as cuda_in_order, not `{pyast.unparse(node)}`")
        return tl

    def int_arg(self, node, kind: str) -> int:
        try:
            n = self.eval(node, f"{kind} N")
        except _Unknown as e:
            self.err(node, f"{kind}: unknown name '{e.name}' for N (N is a literal int or ~k)")
        if not isinstance(n, int) or isinstance(n, bool):
            self.err(node, f"{kind}'s N must be an int (e.g. 0, 1, or ~1 for a lag of 1), "
                           f"not `{pyast.unparse(node)}`")
        return n

    def sync_call(self, s: pyast.Expr, call: pyast.Call, syntax: SyncSyntax):
        kind = syntax.kind
        if call.keywords:
            self.err(call, f"{kind} takes positional arguments only: write {kind}{syntax.params}")
        if kind in ("Arrive", "ReverseArrive"):
            self.err(call, f"{kind} needs its barrier after `>>`: write {kind}{syntax.params}")
        n_args = 2 if kind == "Fence" else 3
        if len(call.args) != n_args:
            self.err(call, f"{kind} takes {n_args} arguments, got {len(call.args)}: write {kind}{syntax.params}")
        if kind == "Fence":
            spec = SyncSpec(
                "Fence",
                first_tl=self.sync_tl(call.args[0], kind, "first sync-tl"),
                second_tl=self.sync_tl(call.args[1], kind, "second sync-tl"),
            )
            return self.emit(s, spec, [])
        bar, mem, ndim = self.barrier_arg(call.args[0], kind)
        spec = SyncSpec(
            kind,
            second_tl=self.sync_tl(call.args[1], kind, "second sync-tl"),
            N=self.int_arg(call.args[2], kind),
            barrier_mem=mem,
            barrier_ndim=ndim,
        )
        return self.emit(s, spec, [bar])

    def arrive(self, s: pyast.Expr, binop: pyast.BinOp):
        call = binop.left
        syntax = self.lookup(call.func) if isinstance(call, pyast.Call) else None
        if not (isinstance(syntax, SyncSyntax) and syntax.kind in ("Arrive", "ReverseArrive")):
            self.err(s, f"`>>` only follows Arrive(...) or ReverseArrive(...) (or an instr that completes on a barrier, "
                        f"a TMA load), not `{pyast.unparse(call)}`")
        kind = syntax.kind
        if call.keywords or len(call.args) != 2:
            self.err(call, f"{kind} takes 2 arguments: write {kind}{syntax.params}")
        first_tl = self.sync_tl(call.args[0], kind, "first sync-tl")
        n = self.int_arg(call.args[1], kind)
        bar, mem, ndim, shape = self.barrier_arg(binop.right, kind, slices=True)
        window_shape = shape if any(x != 1 for x in shape) else ()  # slices: a multicast arrive
        spec = SyncSpec(kind, first_tl=first_tl, N=n, barrier_mem=mem, barrier_ndim=ndim, window_shape=window_shape)
        return self.emit(s, spec, [bar])

    def emit(self, s: pyast.Expr, spec: SyncSpec, args: list):
        if spec.is_reverse and not spec.barrier_mem.allows_reverse:
            self.err(s, f"{spec.kind} needs a barrier @ CudaMbarrier, not @ {spec.barrier_mem.name()}")
        proc = sync_proc(spec)
        self.generated_procs[str(proc.name())] = proc
        call = pyast.Call(func=pyast.Name(id=str(proc.name()), ctx=pyast.Load()), args=args, keywords=[])
        new = pyast.copy_location(pyast.Expr(value=pyast.copy_location(call, s)), s)
        return pyast.fix_missing_locations(new)


class _Unknown(Exception):
    """A name in a compile-time expression is not defined."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name
