"""The projection: a traced op's work is its launch record's work, modelled times follow the
rooflines the data files imply, and the CLI runs end to end on a tiny model and on a full-size
(fake-tensor) 8B config. Refusals, inference and training terms, the search and the validation
table have their own files."""

import configparser
import json
import os

import pytest
import torch

import torch_neuronx
from torch_neuronx import _C
from torch_neuronx.estimate import Layout, estimate
from torch_neuronx.estimate.__main__ import main
from torch_neuronx.estimate._trace import _Recorder

DATA = os.path.join(os.path.dirname(torch_neuronx.__file__), "data")


def _ini(name):
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(os.path.join(DATA, name))
    return parser


def test_traced_work_is_the_launch_records_work():
    # The same ops, run for real on neuron while the recorder traces them: per op, the FLOPs and
    # bytes the bridge derives equal what the eager kernels' launch records carry.
    a = torch.randn(64, 96, device="neuron")
    b = torch.randn(96, 80, device="neuron")
    q = torch.randn(2, 4, 32, 16, device="neuron", dtype=torch.bfloat16)
    torch_neuronx.clear_kernel_trace()
    trace = _C._EstimateTrace()
    with _Recorder(trace):
        c = torch.mm(a, b)
        d = torch.add(c, c)
        torch.softmax(d, dim=-1)
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    torch.neuron.synchronize()
    records = {r["op"]: r for r in torch_neuronx.kernel_trace()}
    rows = {r["op"]: r for r in trace.rows()}
    for op in ("aten::mm", "aten::add.Tensor", "aten::_softmax",
               "aten::_scaled_dot_product_fused_attention_overrideable"):
        assert op in rows and op in records, (op, sorted(rows), sorted(records))
        record, row = records[op], rows[op]
        assert row["ops"]["tensor"] == record["flops"], op
        assert sum(row["ops"].values()) == sum(record["ops"].values()), op
        assert row["bytes"] == record["bytes_read"] + record["bytes_written"], op
    assert rows["aten::mm"]["ops"]["tensor"] == 2 * 64 * 96 * 80


def test_matmul_tile_occupancy():
    tile = 128 * 128 * 2
    # Whole tiles: no padding.
    assert _C._estimate_matmul_tile_ops(1, 128, 128, 512) == 2 * 128 * 128 * 512
    # One row (decode): the 1-column moving tile still costs 64 cycles per stationary tile.
    assert _C._estimate_matmul_tile_ops(1, 1, 4096, 4096) == (4096 // 128) * (4096 // 128) * 64 * tile
    # K padded to 128; the cheaper assignment: 4 stationary tiles of the 512 columns with 100
    # moving rows (400 cycles), not 1 stationary tile of 100 rows with 512 moving (512 cycles).
    assert _C._estimate_matmul_tile_ops(1, 100, 100, 512) == 400 * tile
    assert _C._estimate_matmul_tile_ops(3, 100, 100, 512) == 3 * 400 * tile


def test_compute_bound_matmul_follows_the_engine_model_roofline():
    # One rank, one big bf16 matmul step: the projected step is the FLOPs over the Tensor engine
    # peak of the data file (2 FLOP x MACs/cycle x clock x LNC) times the sustained fraction the
    # estimate's data file states, plus one program launch.
    cores = _ini("neuron_cores.ini")["Trainium2"]
    sustained = float(_ini("estimate.ini")["efficiency.trainium"]["tensor"])
    peak_per_ns = (2 * float(cores["tensor_macs_per_cycle"]) * float(cores["tensor_clock_ghz"]) * 2
                   * sustained)
    launch_ns = float(cores["kernel_launch_ns"])
    cfg = dict(model_type="llama", hidden_size=4096, intermediate_size=4096, num_hidden_layers=1,
               num_attention_heads=32, num_key_value_heads=32, vocab_size=128,
               max_position_embeddings=4096, tie_word_embeddings=False)
    e = estimate(cfg, workload="decode", instance="trn2.48xlarge", compare=("p5en.48xlarge",),
                 gpu_layout=Layout(), batch=2048, context=1)
    p = e.targets[0].projection
    mm = [o for o in p["ops"] if o["op"] == "aten::mm"]
    flops = sum(o["flops"] for o in mm)
    tensor_s = sum(o["engine_s"]["tensor"] for o in mm)
    assert tensor_s == pytest.approx(flops / peak_per_ns * 1e-9, rel=1e-9)  # 2048 rows fill tiles
    assert p["step_s"] >= tensor_s + launch_ns * 1e-9
    # The GPU side: the same FLOPs at the datasheet peak times the stated efficiency.
    data = _ini("estimate.ini")
    gpu = e.targets[1].projection
    gpu_mm = [o for o in gpu["ops"] if o["op"] == "aten::mm"]
    gpu_peak = float(data["gpu.H200"]["bf16_tflops"]) * 1e12 * float(data["efficiency.gpu"]["tensor"])
    assert sum(o["engine_s"]["tensor"] for o in gpu_mm) == pytest.approx(flops / gpu_peak, rel=1e-9)


def test_memory_bound_decode_streams_the_weights():
    # Batch-1 decode of a model whose weights dominate: the step is at least the weights over the
    # rank's HBM bandwidth (derated), and within a few launch costs plus collectives of it.
    cores = _ini("neuron_cores.ini")["Trainium2"]
    eff = float(_ini("estimate.ini")["efficiency.trainium"]["hbm"])
    bw = float(cores["hbm_gbytes_per_s"]) * 2 * eff * 1e9  # LNC=2
    e = estimate("llama-3.1-8b", workload="decode", instance="trn2.48xlarge",
                 layout=Layout(tp=8), compare=(), batch=1, context=256)
    p = e.targets[0].projection
    weights = e.params * 2 / 8
    assert p["step_s"] > weights / bw
    assert p["step_s"] < 1.5 * weights / bw + sum(c["exposed_s"] for c in p["collectives"])
    assert p["phases"][0]["bound"] == "dma (HBM)"


def test_cli_tiny_model_end_to_end(tmp_path, capsys):
    assert main(["tiny-llama", "--seq-len", "128", "--out-dir", str(tmp_path), "--quiet"]) == 0
    out = capsys.readouterr().out
    for name in ("trn2.48xlarge", "p5.48xlarge", "p5en.48xlarge", "MFU", "$ per 1M tokens"):
        assert name in out
    assert (tmp_path / "estimate.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (tmp_path / "estimate.html").read_text()
    assert "data:image/png;base64," in page and "aten::mm" in page
    result = json.loads((tmp_path / "estimate.json").read_text())
    assert [t["instance"] for t in result["targets"]] == ["trn2.48xlarge", "p5.48xlarge", "p5en.48xlarge"]
    for t in result["targets"]:
        assert t["projection"]["step_s"] > 0 and 0 < t["projection"]["mfu"] < 1


def test_cli_full_size_8b_config_under_fake_tensors(tmp_path, capsys):
    # A full-size Llama-3.1-8B training step, TP8 on one trn2.48xlarge: traced without its memory.
    assert main(["llama-3.1-8b", "--layout", "tp=8", "--seq-len", "2048", "--compare", "p5.48xlarge",
                 "--out-dir", str(tmp_path), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "8.03 B parameters" in out
    result = json.loads((tmp_path / "estimate.json").read_text())
    trn2 = result["targets"][0]["projection"]
    # 8B per token: ~6 N FLOPs (+ attention) for forward and backward on 2048 tokens.
    assert trn2["useful_flops_per_step"] >= 6 * 8.0e9 * 2048
    assert trn2["collectives"][0]["name"] == "tp all-reduce"
    # The plan's two all-reduces per layer (attention and MLP outputs), forward and backward, on
    # each of the 32 layers; the chart's parts add up to the step.
    assert trn2["collectives"][0]["count"] == 2 * 2 * 32
    assert sum(s for _, s in trn2["parts"]) == pytest.approx(trn2["step_s"], rel=1e-9)


def test_bad_input_names_the_fix():
    with pytest.raises(ValueError, match="tp=3 does not divide num_attention_heads=4"):
        estimate("tiny-llama", layout=Layout(tp=3), compare=())
    with pytest.raises(ValueError, match="unknown instance 'trn9.huge'"):
        estimate("tiny-llama", instance="trn9.huge")
    with pytest.raises(ValueError, match="bad layout item"):
        Layout.parse("tp=8,xx=2")
    with pytest.raises(ValueError, match="unknown model"):
        estimate("no-such-model")


def test_cli_user_script(tmp_path, capsys):
    # A user's script runs on neuron as it is; its ops are projected as one step of one rank.
    script = tmp_path / "step.py"
    script.write_text(
        "import torch\n"
        "x = torch.randn(128, 256, device='neuron')\n"
        "w = torch.randn(256, 64, device='neuron', requires_grad=True)\n"
        "(x @ w).relu().sum().backward()\n"
    )
    assert main(["--script", str(script), "--tokens", "128", "--compare", "p5.48xlarge",
                 "--out-dir", str(tmp_path / "out"), "--quiet"]) == 0
    assert "16.38 k parameters" in capsys.readouterr().out
    result = json.loads((tmp_path / "out" / "estimate.json").read_text())
    trn2 = result["targets"][0]["projection"]
    # Forward x @ w and backward grad @ x^T-style products: 2 matmuls of 2*128*256*64 FLOPs each.
    assert trn2["useful_flops_per_step"] == 2 * (2 * 128 * 256 * 64)
    assert trn2["tokens_per_step"] == 128
    # Its parameters are the trainable leaves its ops read (w: 256 x 64), not "0.00 B".
    assert result["params"] == 256 * 64
