"""Checking Python arguments against a proc's signature before anything is launched.

Pure Python over duck-typed arrays (`__cuda_array_interface__` for device
memory, NumPy for host memory), so it is tested on machines without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
from exo.core.LoopIR import LoopIR, T
from exo.core.memory import DRAM

from ..analysis.checks import misaligned_need
from ..core.dtypes import bf16
from ..core.ir import INDEX_LIMIT, evaluate, sizes_text, walk_stmts
from ..errors import BuildError, place_of
from ..platforms.cuda import CudaGmemLinear

_DTYPES = {T.f32: np.float32, T.f64: np.float64, T.f16: np.float16, T.i8: np.int8, T.ui8: np.uint8,
           T.ui16: np.uint16, T.i32: np.int32, bf16: np.uint16}  # fmt: skip
# NumPy and CuPy have no bfloat16: a bf16 parameter takes the bits, as uint16 or int16
# (cupy.asarray(x.view(np.uint16)), torch_tensor.view(torch.int16)), or an ml_dtypes bfloat16 array.
_BF16_BITS = {np.dtype(np.uint16), np.dtype(np.int16)}


def bf16_bits(values, xp=np):
    """The bits (uint16) of the bf16 nearest each value (to nearest even), as a bf16 parameter takes them; `xp`:
    NumPy, or CuPy for device arrays."""
    bits = xp.asarray(values, xp.float32).view(xp.uint32)
    return ((bits + np.uint32(0x7FFF) + ((bits >> 16) & 1)) >> 16).astype(xp.uint16)


def bf16_floats(bits, xp=np):
    """The float32 values of bf16 bits (exact: a bf16 is a float32's upper half)."""
    return (bits.astype(xp.uint32) << 16).view(xp.float32)


@dataclass(frozen=True)
class ArgSpec:
    """One parameter: `kind` is "int" (size/index), "bool", "cuda" (CudaGmemLinear tensor) or "host" (DRAM tensor)."""

    name: str
    kind: str
    dtype: Optional[np.dtype] = None
    shape: tuple = ()  # LoopIR expressions over the size parameters
    writes: bool = False
    positive: bool = False
    bf16: bool = False  # dtype is then the bits' dtype; see _BF16_BITS


@dataclass(frozen=True)
class ProcSpec:
    name: str
    args: tuple
    preds: tuple  # LoopIR expressions (the proc's assertions)
    alignment: tuple = ()  # analysis.checks.AlignmentNeed: windows the GPU code needs aligned at a call's sizes


# The widest access any instr makes of a buffer's start (cp.async, vector stores): the analyses prove alignment
# from offsets within a buffer, taking its start to be aligned this much.
BASE_ALIGNMENT = 16


def _written_params(p: LoopIR.proc) -> set:
    """Names of the parameters (and buffers) the proc writes: directly, through windows of them, or through callees,
    whose own windows are resolved too (exo's write sets name a callee's window `row = y[i, :]`, not its parameter
    `y`: a wrapper of a proc that writes through a window passed its arguments' checks as read-only, aliases
    included, and computed something else on the GPU)."""
    alias = {s.name: s.rhs.name for s in walk_stmts(p.body) if isinstance(s, LoopIR.WindowStmt)}

    def root(name):
        while name in alias:
            name = alias[name]
        return name

    written = set()
    for s in walk_stmts(p.body):
        if isinstance(s, (LoopIR.Assign, LoopIR.Reduce)):
            written.add(root(s.name))
        elif isinstance(s, LoopIR.Call):
            theirs = _written_params(s.f)
            written |= {root(arg.name) for param, arg in zip(s.f.args, s.args)
                        if param.name in theirs and isinstance(arg, (LoopIR.Read, LoopIR.WindowExpr))}
    return written


def proc_spec(p: LoopIR.proc) -> ProcSpec:
    """What the checker needs to know about a proc's parameters; BuildError for unsupported ones."""
    written = _written_params(p)
    args = []
    for a in p.args:
        if a.type in (T.size, T.index):
            args.append(ArgSpec(str(a.name), "int", positive=a.type == T.size))
        elif a.type == T.bool:
            args.append(ArgSpec(str(a.name), "bool"))
        elif isinstance(a.type, T.Tensor) and a.type.basetype() not in _DTYPES:
            raise BuildError(f"{p.name}: parameter {a.name} : {a.type} has no element type of its own (exo's R is "
                             "any real): give it one (f32, f16, bf16, f64, ...) before building or running it", p.srcinfo)
        elif isinstance(a.type, T.Tensor) and not a.type.is_win() and a.mem in (CudaGmemLinear, DRAM):
            kind = "cuda" if a.mem is CudaGmemLinear else "host"
            dtype = np.dtype(_DTYPES[a.type.basetype()])
            args.append(ArgSpec(str(a.name), kind, dtype, tuple(a.type.hi), a.name in written, bf16=a.type.basetype() == bf16))
        else:
            mem = a.mem.name() if a.mem else ""
            raise BuildError(f"{p.name}: parameter {a.name} : {a.type} @ {mem} cannot be passed from Python yet", p.srcinfo)
    return ProcSpec(p.name, tuple(args), tuple(p.preds))


def size_refusal(spec: ProcSpec, sizes: dict) -> Optional[str]:
    """Why the proc cannot be called with these sizes (name -> value), or None: the first of its assertions they
    make false (one that needs more than sizes holds), or a window of an instr they misalign."""
    pred = next((pred for pred in spec.preds if evaluate(pred, sizes) is False), None)
    if pred is not None:
        return f"assertion `{pred}` does not hold for {sizes_text(sizes)}"
    misaligned = misaligned_need(spec.alignment, sizes)
    if misaligned is not None:
        need, why = misaligned
        return f"at {sizes_text(sizes)}, `{need.stmt}` ({place_of(need.srcinfo)}): {why}"
    return None


def _c_contiguous(shape: tuple, strides: Optional[tuple], itemsize: int) -> bool:
    if strides is None:
        return True
    expected = itemsize
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


def check_args(spec: ProcSpec, values: Sequence, current_device: Optional[int]) -> list:
    """The raw C values (ints, pointers) for a call, or TypeError/ValueError saying what is wrong."""
    where = f"{spec.name}()"
    if len(values) != len(spec.args):
        names = ", ".join(a.name for a in spec.args)
        raise TypeError(f"{where} takes {len(spec.args)} arguments ({names}), got {len(values)}")
    env = {}
    for a, v in zip(spec.args, values):
        if a.kind in ("int", "bool"):
            want = bool if a.kind == "bool" else int
            if not isinstance(v, (want, np.integer if want is int else np.bool_)) or (want is int and isinstance(v, bool)):
                raise TypeError(f"{where}: {a.name} must be a Python {want.__name__}, got {type(v).__name__}")
            v = bool(v) if want is bool else int(v)  # abs() of np.int64(-2**63) is itself, negative
            if a.positive and v <= 0:
                raise ValueError(f"{where}: size {a.name} must be positive, got {v}")
            if want is int and abs(v) >= INDEX_LIMIT:
                raise ValueError(f"{where}: {a.name} = {v} is out of range: GPU code indexes with 32-bit ints, so "
                                 f"sizes and indices must be below 2^31")
            env[a.name] = v
    refusal = size_refusal(spec, env)
    if refusal is not None:
        raise ValueError(f"{where}: {refusal}")
    raw, extents = [], []
    for a, v in zip(spec.args, values):
        if a.kind in ("int", "bool"):
            raw.append(int(v))
        else:
            ptr, nbytes = _check_array(where, a, v, env, current_device)
            raw.append(ptr)
            extents.append((a, ptr, nbytes))
    _check_distinct(where, extents)
    return raw


def _check_distinct(where: str, extents: list) -> None:
    """A proc's tensor arguments are distinct buffers (exo's meaning, which sync_check checks): two that share
    memory, one of them written, would compute something else on the GPU."""
    for i, (a, start_a, size_a) in enumerate(extents):
        for b, start_b, size_b in extents[i + 1:]:
            if (a.writes or b.writes) and a.kind == b.kind and start_a < start_b + size_b and start_b < start_a + size_a:
                raise ValueError(f"{where}: {a.name} and {b.name} overlap in memory, and the proc writes "
                                 f"{a.name if a.writes else b.name}: pass distinct arrays (a proc's arguments never alias)")


def _check_array(where: str, a: ArgSpec, v, env: dict, current_device: Optional[int]) -> tuple:
    """(address, size in bytes) of an array argument, or TypeError/ValueError saying what is wrong."""
    shape = tuple(evaluate(h, env) for h in a.shape)
    count = int(np.prod(shape))
    if a.kind == "cuda":
        try:
            cai = getattr(v, "__cuda_array_interface__", None)
        except (RuntimeError, KeyError, TypeError) as e:  # torch: a tensor that requires grad, a bfloat16 one
            raise TypeError(f"{where}: {a.name} cannot be passed as a GPU array ({type(e).__name__}: {e}); for a torch "
                            "tensor pass t.detach(), a bfloat16 one as t.view(torch.int16)") from None
        if cai is None:
            hint = " (a NumPy array is in host memory: copy it with cupy.asarray)" if isinstance(v, np.ndarray) else ""
            raise TypeError(f"{where}: {a.name} lives in CudaGmemLinear and must be a CuPy array, got {type(v).__name__}{hint}")
        got_shape, dtype = tuple(cai["shape"]), np.dtype(cai["typestr"])
        strides, (ptr, readonly) = cai.get("strides"), cai["data"]
        device = getattr(v, "device", None)
        device = getattr(device, "id", getattr(device, "index", None))  # CuPy's Device.id, torch's device.index
        if current_device is not None and device is not None and device != current_device:
            raise ValueError(f"{where}: {a.name} is on GPU {device}, but the current device is GPU {current_device}")
    else:
        if not isinstance(v, np.ndarray):
            hint = " (a GPU array: copy it with .get())" if hasattr(v, "__cuda_array_interface__") else ""
            raise TypeError(f"{where}: {a.name} is read in host memory, so it must be a NumPy array (run_cpu takes one for "
                            f"CudaGmemLinear parameters too), got {type(v).__name__}{hint}")
        got_shape, dtype, strides = v.shape, v.dtype, v.strides
        ptr, readonly = v.ctypes.data, not v.flags.writeable
    if a.bf16 and dtype not in _BF16_BITS and dtype.name != "bfloat16":
        raise TypeError(f"{where}: {a.name} is bf16: pass a bfloat16 array or its bits as uint16 or int16, got {dtype}")
    if dtype != a.dtype and not a.bf16:
        raise TypeError(f"{where}: {a.name} must have dtype {a.dtype}, got {dtype}")
    if got_shape != shape:
        raise ValueError(f"{where}: {a.name} must have shape {shape}, got {got_shape}")
    if not _c_contiguous(got_shape, tuple(strides) if strides is not None else None, dtype.itemsize):
        raise ValueError(f"{where}: {a.name} must be C-contiguous (use .copy() or ascontiguousarray)")
    if a.writes and readonly:
        raise ValueError(f"{where}: {a.name} is written by the proc but the array is read-only")
    if a.kind == "cuda" and count >= INDEX_LIMIT:
        raise ValueError(f"{where}: {a.name} has {count} elements: GPU code indexes with 32-bit ints, "
                         f"so an array must have fewer than 2^31")
    if a.kind == "cuda" and ptr % BASE_ALIGNMENT:
        raise ValueError(f"{where}: {a.name} starts {ptr % BASE_ALIGNMENT} bytes past a {BASE_ALIGNMENT}-byte "
                         f"boundary (a view into another array?): the kernel's vector accesses need it aligned; "
                         f"pass a copy (.copy())")
    return ptr, count * a.dtype.itemsize
