"""What to tell the user for each finding: the message (what differs) and the fix."""

# Ops whose TorchNeuron fallback has a well-known way around it.
_OP_HINTS = {
    "normal_": "random numbers: draw them on the CPU once (or with a seeded CPU generator) and "
               "copy them over, or use dropout (aten::native_dropout is native)",
    "uniform_": "random numbers: draw them on the CPU once and copy them over, or use dropout "
                "(aten::native_dropout is native)",
    "bernoulli_": "use torch.nn.functional.dropout (aten::native_dropout is native)",
    "bernoulli": "use torch.nn.functional.dropout (aten::native_dropout is native)",
    "random_": "draw the integers on the CPU and copy them over",
    "randperm": "draw the permutation on the CPU and copy it over",
    "multinomial": "sample on the CPU (torch.multinomial on CPU probabilities)",
    "sort": "use torch.topk (native) when only the largest/smallest k are needed, or "
            "argsort(stable=True) (aten::argsort.stable is native)",
    "cumprod": "use exp(cumsum(log(x))) for positive inputs (cumsum, log, exp are native)",
    "median": "use torch.topk / kthvalue on the CPU",
    "unique": "keep the step on the CPU, or use a fixed-size alternative (nonzero_static)",
    "_unique2": "keep the step on the CPU, or use a fixed-size alternative (nonzero_static)",
    "upsample_nearest2d": "use F.interpolate on the CPU for preprocessing, or a conv-transpose",
    "upsample_bilinear2d": "use F.interpolate on the CPU for preprocessing",
    "max_pool2d_with_indices": "use a strided convolution or avg pooling where the model allows",
    "avg_pool2d": "use a convolution with a constant kernel (convolution is native)",
}


def cpu_fallback(op: str, silent: bool) -> tuple:
    base = op.split("::", 1)[1].split(".", 1)[0]
    message = (f"{op} has no Neuron kernel in TorchNeuron 2.33: it runs on the host CPU, with "
               f"the tensors copied off and back onto the device"
               + (" (silently: a view op TorchNeuron does not warn about)." if silent else
                  " (TorchNeuron warns once, then stays silent)."))
    hint = _OP_HINTS.get(base)
    generic = ("express it with ops TorchNeuron runs natively (see "
               "torch_neuronx/data/torchneuron_2_33_coverage.json), move it out of the hot loop, "
               "or accept the host round trip; on hardware, torch_neuronx.get_fallback_ops() "
               "lists them.")
    fix = f"{hint}; otherwise {generic}" if hint else generic[0].upper() + generic[1:]
    return message, fix


FLOAT64 = (
    "float64 on the neuron device: TorchNeuron has no 64-bit floating point; it computes in "
    "float32 and copies 64-bit tensors through the host, so results lose precision.",
    "use float32 (x.float(), torch.set_default_dtype(torch.float32), or "
    "np.array(..., dtype=np.float32) before torch.from_numpy), or keep the float64 part on the "
    "CPU.",
)

COMPLEX = (
    "complex tensor on the neuron device: TorchNeuron decomposes complex ops into real ones "
    "(TORCH_NEURONX_COMPLEX_DECOMPOSE), down-casts complex128, and its complex views "
    "(view_as_real, conj, real/imag) were among its failing upstream tests.",
    "write the math in real arithmetic (e.g. rotary embeddings with cos/sin tensors instead of "
    "torch.polar and a complex multiply), or keep the complex part on the CPU.",
)


def int64_range(value) -> tuple:
    return (
        f"int64 value {value} does not fit in int32; TorchNeuron computes int64 as int32, so it "
        f"would wrap around.",
        "keep such values on the CPU, offset/rescale them into the int32 range, or split them "
        "into two int32 halves.",
    )


INT64_INFO = (
    "int64 tensors on the neuron device (ids, indices, counters): TorchNeuron computes them as "
    "int32; every value seen here fits.",
    "nothing to do while values stay within +-2**31; cast to int32 to make it explicit.",
)

CHANNELS_LAST = (
    "channels_last memory format on the neuron device: TorchNeuron supports only contiguous and "
    "preserve formats and raises 'Neuron tensors only support contiguous or preserve memory "
    "format'.",
    "drop memory_format=torch.channels_last (and .to(memory_format=...)) for the neuron device; "
    "convolutions take contiguous NCHW tensors there.",
)

CHANNELS_LAST_TENSOR = (
    "a neuron tensor with channels-last strides that no memory_format argument asked for (a "
    "channels-last CPU tensor copied onto the device, or an op preserving its input's format): "
    "TorchNeuron keeps only contiguous and preserve formats, makes a tensor contiguous when it "
    "copies it onto the device, and gives contiguous results for preserve_format, so there the "
    "tensor is contiguous or, where an op needs the layout, refused. Values agree; strides, "
    "is_contiguous(memory_format=...) and .view() on it differ.",
    "make the tensor contiguous before it reaches the device (.contiguous() on the CPU, "
    "model.to(memory_format=torch.contiguous_format)) and do not rely on its strides there.",
)


def dynamic_shapes(op: str, shapes: int) -> tuple:
    return (
        f"{op} ran here with {shapes} different input shapes: TorchNeuron compiles every eager op "
        f"once per (shape, dtype), so each new shape is another compile before it runs.",
        "pad or bucket inputs to a few fixed shapes (e.g. pad sequences to a multiple of 128 and "
        "pass an attention mask), drop the last partial batch (drop_last=True); for "
        "transformers generate(), a fixed-size KV cache (cache_implementation='static').",
    )


def recompile(reason: str) -> tuple:
    return (
        f"torch.compile recompiled ({reason}). TorchNeuron compiles static shapes only: every new "
        f"input shape is a new graph compile (minutes for large graphs).",
        "pad or bucket inputs to fixed shapes, pass per-step Python scalars as tensors, and "
        "compile with dynamic=False; mark_dynamic does not help on TorchNeuron.",
    )


def static_shape_program(shapes) -> tuple:
    return (
        f"a compiled graph ran with new input shapes {shapes}: here one symbolic program serves "
        f"them; TorchNeuron compiles static shapes only and would compile the graph again.",
        "pad or bucket inputs to fixed shapes (e.g. fixed sequence lengths) so the compiled "
        "graph sees one shape.",
    )


DYNAMIC_COMPILE = (
    "torch.compile with dynamic=True: TorchNeuron rejects dynamic=True (its compiler raises on "
    "any symbolic dimension).",
    "leave dynamic unset or pass dynamic=False, and keep input shapes fixed.",
)


def graph_break(reason: str) -> tuple:
    return (
        f"graph break: {reason}. TorchNeuron compiles each piece as its own graph with host "
        f"round trips between them; its docs recommend fullgraph=True, under which this break "
        f"raises.",
        "remove the break inside the compiled region: no .item()/.tolist()/print or "
        "data-dependent Python branching on tensor values there; move such code outside, or use "
        "torch.where / torch.cond; then compile with fullgraph=True.",
    )


ASYNC_LOAD = (
    "transformers loaded the weights onto the neuron device with its asynchronous (threaded) "
    "loader, which hangs on TorchNeuron (TRL's Neuron SFT script disables it).",
    "set HF_DEACTIVATE_ASYNC_LOAD=1 in the environment before from_pretrained, or load on the "
    "CPU and move the model with .to('neuron').",
)
