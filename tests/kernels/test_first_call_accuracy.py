"""The first transcendental op of a process is as accurate as every later one.

ATen computes contiguous float unary ops with oneMKL's VML, each intra-op thread on its chunk,
and oneMKL picks its kernel on a function's first call: when that call runs on several threads
at once, one thread may compute its chunk with a low-accuracy kernel (PyTorch issue 188792).
Eager neuron ops run those CPU kernels over HBM; torch_neuronx settles the choice on one thread
when it loads (VmlDispatch.cpp). Without that, each fresh process below failed about one time in
four here, so a dozen processes catch a regression almost surely."""

import json
import os
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import json, torch  # autoloads torch_neuronx
    torch.set_num_threads(2)  # the race needs two threads, even on a one-core machine
    torch.manual_seed(0)
    base = torch.rand(64, 64) * 0.9 + 0.05  # 4096 elements: two chunks of ATen's VML grain
    bad = []
    for name in ("exp", "log", "sqrt", "tanh", "sin", "erf"):
        op = getattr(torch, name)
        x = base.to("neuron")
        first, again = op(x).cpu(), op(x).cpu()
        reference = op(base.double()).float()  # the exact value, rounded once
        if not torch.equal(first, again):
            rel = ((first - reference).abs() / reference.abs()).max().item()
            bad.append({"op": name, "max_rel_error_of_first_call": rel})
    print(json.dumps(bad))
    """
)


def test_first_call_of_vml_functions_is_accurate_in_fresh_processes():
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    failures = []
    for _ in range(6):  # six rounds of two concurrent processes
        procs = [
            subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        try:
            for p in procs:
                out, err = p.communicate(timeout=120)
                assert p.returncode == 0, err
                failures += json.loads(out.strip().splitlines()[-1])
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    assert failures == [], f"first calls less accurate than later ones: {failures}"
