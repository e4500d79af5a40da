"""Tensor indirection (``NkiTensor.indirect``, NeuronCore-v4): a compute instruction reads
(gather) or writes (scatter) columns of an SBUF / PSUM tensor at free-dim offsets that an SBUF
tensor of uint16 holds, read when the instruction runs.

The reading implemented, from AWS's NKI 0.6 stub and its tensor-indirection guide: partitions
come in groups of G adjacent partitions (16 on the Vector, Scalar and GpSimd engines, 32 on the
Tensor engine), every partition of a group uses the same offsets, and group g reads them from
its own G rows of the (P, K) index tensor in a snake: offset i of group g is
``index[g * G + i % G, i // G]``. (The stub's ``index[i % G, i // G]`` read with rows relative
to the group; with the index shaped (P, K), P the data's partitions, each group has G rows of
its own, and ``i // G`` stays inside the K columns only that way.) A group holds G * K offsets,
so ``num_elem`` (default ``index.size``, as the stub says) must be at most G * K: with P > G the
default is more than a group holds, and the instruction stops naming ``num_elem=``.

The view is a tile of shape (P, num_elem) that the instruction reads or writes; the tracer
stages it (OP_TENSOR_INDIRECT, untimed) just before the instruction for a gather and just after
for a scatter. A scatter with repeated offsets writes in partition, then element order: the
last element written to an offset stays.
"""

from __future__ import annotations

import math

from nki import _core
from nki._core import OP_TENSOR_INDIRECT, TENSOR, error

# Partition-group size per engine: 32 on the Tensor engine, 16 on the others.
_GROUP_TENSOR, _GROUP_OTHER = 32, 16


def indirect_view(data, index, num_elem=None):
    tracer = _core.current_tracer()
    if tracer.spec["version"] < 4:
        raise error("NkiTensor.indirect (tensor indirection) needs NeuronCore-v4 (trn3); this "
                    f"kernel specialises for NeuronCore-v{tracer.spec['version']} "
                    f"({tracer.target}): set NEURON_PLATFORM_TARGET_OVERRIDE=trn3, or "
                    "@nki.jit(platform_target=\"trn3\"), or run on a trn3 device")
    if not isinstance(data, _core.Tensor) or not data._buffer.on_chip:
        raise error("NkiTensor.indirect: the data tensor must be in SBUF or PSUM (tensor "
                    "indirection addresses on-chip columns; for HBM rows use dma_copy with "
                    ".ap(vector_offset=...))")
    if not isinstance(index, _core.Tensor) or index._buffer.memory is not _core.sbuf:
        raise error("NkiTensor.indirect: the index must be an SBUF tensor of uint16 offsets")
    if index.dtype.name != "uint16":
        raise error(f"NkiTensor.indirect: the index is {index.dtype.name}; offsets are uint16")
    if len(index.shape) != 2 or index.shape[0] != data.shape[0]:
        raise error(f"NkiTensor.indirect: the index has shape {tuple(index.shape)}; it must be "
                    f"(P, K) with P = {data.shape[0]}, the data tensor's partitions")
    size = index.shape[0] * index.shape[1]
    n = size if num_elem is None else int(num_elem)
    if n <= 0 or n > size:
        raise error(f"NkiTensor.indirect: num_elem={n} must be in [1, index.size = {size}]")
    staged = tracer.allocate((data.shape[0], n), data.dtype, data._buffer.memory,
                             name="indirect view")
    staged._buffer.indirection = (data, index, n, _core.caller_location())
    # The interpreter's staging, not a kernel allocation: it takes no SBUF / PSUM capacity (the
    # engine streams the columns) and is never folded away.
    staged._buffer.internal = True
    return staged


# The slots an instruction writes (Program.h: dst, the reduction result d, the accumulators e).
_WRITTEN = ("dst", "d", "e")

# Per opcode, the operands that may be indirect and the engines that may run it so, from the
# stub's "Tensor indirection" paragraphs: dst and the data input (slot a) of tensor_copy,
# tensor_tensor (data1), tensor_scalar, tensor_scalar_reduce, tensor_reduce, activation,
# activation_reduce, activate2, exponential and tensor_scalar_cumulative; dst and the predicate of
# tensor_copy_predicated (its dst also read, slot c); stationary and moving of nc_matmul.
_ALL = (_core.TENSOR, _core.VECTOR, _core.SCALAR, _core.GPSIMD)
_RULES = {
    _core.OP_COPY: (("dst", "a"), (_core.VECTOR, _core.SCALAR), "tensor_copy"),
    _core.OP_TT: (("dst", "a"), (_core.VECTOR, _core.GPSIMD), "tensor_tensor (data1, not data2)"),
    _core.OP_TS: (("dst", "a"), (_core.VECTOR, _core.SCALAR, _core.GPSIMD),
                  "tensor_scalar (data, not its operands)"),
    _core.OP_ACT: (("dst", "a"), _ALL, "activation / exponential (data, not bias or scale)"),
    _core.OP_ACTIVATE2: (("dst", "a"), _ALL, "activate2 (data)"),
    _core.OP_REDUCE: (("dst", "a"), _ALL, "tensor_reduce"),
    _core.OP_CUMULATIVE: (("dst", "a"), _ALL, "tensor_scalar_cumulative (src)"),
    _core.OP_SELECT: (("dst", "a", "c"), _ALL, "tensor_copy_predicated (dst, predicate)"),
    _core.OP_MATMUL: (("a", "b"), (_core.TENSOR,), "nc_matmul (stationary, moving)"),
}
_MATMUL_DTYPES = ("float16", "bfloat16", "float8_e4m3", "float8_e5m2", "float8_e4m3fn")


def _start_partition(view):
    return view.offset // view._partition_stride()


def expand(ins):
    """The instructions to emit for `ins` with its indirect views staged: gathers before it,
    scatters after it (in slot order)."""
    before, after = [], []
    group = _GROUP_TENSOR if ins.engine == TENSOR else _GROUP_OTHER
    for slot, view in ins.views.items():
        if view is None or getattr(view._buffer, "indirection", None) is None:
            continue
        data, index, n, where = view._buffer.indirection
        if view.offset != 0 or view.numel() != view._buffer.elements or view._dtype is not None \
                or not view.is_contiguous():
            raise error("a view of an indirect view: pass the view .indirect() returns to the "
                        "instruction whole (slice the data tensor or the index instead)")
        if ins.op == _core.OP_MATMUL_MX:
            raise error("tensor indirection on nc_matmul_mx (its data and scale pairs) is not "
                        "supported here yet: gather the operands with nisa.tensor_copy(src="
                        "t.indirect(index)) first", where)
        rule = _RULES.get(ins.op)
        # OP_SELECT is tensor_copy_predicated only where it reads its own dst as c (nisa.select
        # has no tensor indirection in the stub).
        copy_predicated = ins.op == _core.OP_SELECT and ins.views.get("c") is not None \
            and ins.dst is not None and ins.views["c"]._buffer is ins.dst._buffer
        if ins.op == _core.OP_SELECT and not copy_predicated:
            rule = None
        if rule is None or slot not in rule[0]:
            raise error("tensor indirection is not documented for this operand of this "
                        "instruction (AWS's stub allows it on: dst and the data input of "
                        "tensor_copy, tensor_tensor, tensor_scalar(_reduce), tensor_reduce, "
                        "activation(_reduce), activate2, exponential, tensor_scalar_cumulative; "
                        "dst and predicate of tensor_copy_predicated; stationary and moving of "
                        "nc_matmul)", where)
        if ins.engine not in rule[1]:
            raise error(f"{rule[2]} with tensor indirection runs on the "
                        f"{' / '.join(_core.ENGINE_NAMES[e] for e in rule[1])} engine, not "
                        f"{_core.ENGINE_NAMES[ins.engine]}", where)
        if ins.op == _core.OP_MATMUL and data.dtype.name not in _MATMUL_DTYPES:
            raise error(f"nc_matmul's indirect operands must be {', '.join(_MATMUL_DTYPES)}; "
                        f"this one is {data.dtype.name}", where)
        if slot == "dst" and ins.engine == _core.SCALAR and data._buffer.memory is _core.psum:
            raise error("on the Scalar engine a scattered dst cannot be in PSUM (AWS's stub)",
                        where)
        first = _start_partition(index)
        if first % 32:
            raise error(f"the index of an indirect view starts on partition {first}; it must "
                        "start on a quadrant boundary (a multiple of 32)", where)
        if slot not in _WRITTEN and _start_partition(data) != first:
            raise error(f"an indirect operand starts on partition {_start_partition(data)} and "
                        f"its index on {first}: they must start on the same partition", where)
        src = ins.views.get("a")
        if slot == "dst" and src is not None and src._buffer.memory is _core.sbuf \
                and src._buffer.indirection is None and _start_partition(src) != first:
            raise error(f"a scattered dst's index starts on partition {first} and the "
                        f"instruction's source on {_start_partition(src)}: they must start on "
                        "the same partition", where)
        if slot in _WRITTEN and ins.op in (_core.OP_MATMUL, _core.OP_MATMUL_MX):
            raise error("tensor indirection on nc_matmul's dst (a PSUM scatter, accumulating) "
                        "is not supported here yet: write the product to a PSUM tile and scatter "
                        "it with nisa.tensor_copy(dst=psum.indirect(index), ...)")
        parts, k = index.shape
        if parts % group and parts > group:
            raise error(f"tensor indirection on this engine reads offsets per group of {group} "
                        f"partitions; the data's {parts} partitions are not whole groups", where)
        rows = min(parts, group)
        if n > rows * k if parts < group else n > group * k:
            raise error(f"tensor indirection: num_elem={n} offsets, but a partition group of "
                        f"{group} partitions on this engine holds {min(parts, group)} x {k} of "
                        "them (its rows of the index); pass num_elem= at most "
                        f"{min(parts, group) * k}", where)
        if parts < group and n > parts:
            # offset i comes from row i % G of the group: rows past the data's partitions.
            raise error(f"tensor indirection: offset {parts} reads index row {parts % group}, "
                        f"past the {parts} partitions of the index; use num_elem <= {parts}",
                        where)
        flat = data.reshape((data.shape[0], math.prod(data.shape[1:]))) if data.ndim > 2 \
            else data
        if slot in _WRITTEN:
            after.append(_core.Instr(OP_TENSOR_INDIRECT, ins.engine, ins.program, ins.location,
                                     {"dst": flat, "a": view, "b": index}, imm0=group, axes=1))
        else:
            before.append(_core.Instr(OP_TENSOR_INDIRECT, ins.engine, ins.program, ins.location,
                                      {"dst": view, "a": flat, "b": index}, imm0=group, axes=0))
    return before, after
