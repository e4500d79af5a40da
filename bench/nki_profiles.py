"""The NKI timeline against AWS's published profiles of its own tutorial kernels.

AWS's NKI matrix-multiplication tutorial (Neuron SDK 2.23 and earlier; trn1.32xlarge, BF16,
[4096, 8192] @ [8192, 8192]) publishes the latency of four kernels; its kernel-optimization
tutorial (Neuron SDK 2.32; trn2, FP32, the same shape) publishes the engines' active time of the
same four algorithms. The kernels below are this project's own NKI 0.6 code following the
tutorials' algorithms (tile loops, hoisted loads, free-dimension blocking, full blocking with SBUF
accumulation); they are specialised and timed, not run (a run would take minutes on the host).

    python bench/nki_profiles.py            # print the comparison
    python bench/nki_profiles.py --write    # also replace the table in docs/nki.md
"""

from __future__ import annotations

import os
import sys
import time
import warnings

import nki
import nki.isa as nisa
import nki.language as nl

M, K, N = 4096, 8192, 8192
TM, TK, TN = 128, 128, 512


def tiled(lhsT, rhs):
    """Every (m, n) output tile accumulates over k, loading both input tiles inside the k loop."""
    k_total, m_total = lhsT.shape
    n_total = rhs.shape[1]
    result = nl.ndarray((m_total, n_total), lhsT.dtype, buffer=nl.shared_hbm)
    for m in range(m_total // TM):
        for n in range(n_total // TN):
            acc = nl.ndarray((TM, TN), nl.float32, buffer=nl.psum)
            for k in range(k_total // TK):
                a = nl.ndarray((TK, TM), lhsT.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                b = nl.ndarray((TK, TN), rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=b, src=rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                nisa.nc_matmul(dst=acc, stationary=a, moving=b)
            out = nl.ndarray((TM, TN), result.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=out, src=acc)
            nisa.dma_copy(dst=result[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], src=out)
    return result


def _load_column(src, col, width, k_total):
    tiles = []
    for k in range(k_total // TK):
        t = nl.ndarray((TK, width), src.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=src[k * TK:(k + 1) * TK, col * width:(col + 1) * width])
        tiles.append(t)
    return tiles


def _mm_store(result, lhs_tiles, rhs_tiles, m, n):
    acc = nl.ndarray((TM, TN), nl.float32, buffer=nl.psum)
    for a, b in zip(lhs_tiles, rhs_tiles):
        nisa.nc_matmul(dst=acc, stationary=a, moving=b)
    out = nl.ndarray((TM, TN), result.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=out, src=acc)
    nisa.dma_copy(dst=result[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], src=out)


def hoisted(lhsT, rhs):
    """The K column of lhsT loaded once per m, of rhs once per (m, n)."""
    k_total, m_total = lhsT.shape
    n_total = rhs.shape[1]
    result = nl.ndarray((m_total, n_total), lhsT.dtype, buffer=nl.shared_hbm)
    for m in range(m_total // TM):
        lhs_tiles = _load_column(lhsT, m, TM, k_total)
        for n in range(n_total // TN):
            _mm_store(result, lhs_tiles, _load_column(rhs, n, TN, k_total), m, n)
    return result


def block_free(lhsT, rhs, bm_tiles=2, bn_tiles=2):
    """Blocks of bm_tiles x 128 rows and bn_tiles x 512 columns: each loaded column serves a
    block of output tiles."""
    k_total, m_total = lhsT.shape
    n_total = rhs.shape[1]
    result = nl.ndarray((m_total, n_total), lhsT.dtype, buffer=nl.shared_hbm)
    for mb in range(m_total // (TM * bm_tiles)):
        lhs = [_load_column(lhsT, mb * bm_tiles + i, TM, k_total) for i in range(bm_tiles)]
        for nb in range(n_total // (TN * bn_tiles)):
            rhs_cols = [_load_column(rhs, nb * bn_tiles + j, TN, k_total) for j in range(bn_tiles)]
            for i in range(bm_tiles):
                for j in range(bn_tiles):
                    _mm_store(result, lhs[i], rhs_cols[j], mb * bm_tiles + i, nb * bn_tiles + j)
    return result


def fully_blocked(lhsT, rhs, tm=16, tn=2, tk=8):
    """All three dims blocked; partial sums over K blocks accumulate in SBUF (Vector engine)."""
    k_total, m_total = lhsT.shape
    n_total = rhs.shape[1]
    bm, bn, bk = TM * tm, TN * tn, TK * tk
    result = nl.ndarray((m_total, n_total), lhsT.dtype, buffer=nl.shared_hbm)
    for n in range(n_total // bn):
        acc = [[[nl.zeros((TM, TN), lhsT.dtype) for _ in range(tn)] for _ in range(tm)]
               for _ in range(m_total // bm)]
        for k in range(k_total // bk):
            rhs_t = []
            for r in range(tk):
                t = nl.ndarray((TK, bn), rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=rhs[(k * tk + r) * TK:(k * tk + r + 1) * TK,
                                             n * bn:(n + 1) * bn])
                rhs_t.append(t)
            for m in range(m_total // bm):
                lhs_t = []
                for r in range(tk):
                    t = nl.ndarray((TK, bm), lhsT.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=t, src=lhsT[(k * tk + r) * TK:(k * tk + r + 1) * TK,
                                                  m * bm:(m + 1) * bm])
                    lhs_t.append(t)
                for j in range(tn):
                    for i in range(tm):
                        ps = nl.ndarray((TM, TN), nl.float32, buffer=nl.psum)
                        for r in range(tk):
                            nisa.nc_matmul(dst=ps, stationary=lhs_t[r][:, i * TM:(i + 1) * TM],
                                           moving=rhs_t[r][:, j * TN:(j + 1) * TN])
                        nisa.tensor_tensor(dst=acc[m][i][j], data1=acc[m][i][j], data2=ps,
                                           op=nl.add)
        for m in range(m_total // bm):
            for i in range(tm):
                packed = nl.ndarray((TM, bn), result.dtype, buffer=nl.sbuf)
                for j in range(tn):
                    nisa.tensor_copy(dst=packed[:, j * TN:(j + 1) * TN], src=acc[m][i][j])
                nisa.dma_copy(dst=result[(m * tm + i) * TM:(m * tm + i + 1) * TM,
                                         n * bn:(n + 1) * bn], src=packed)
    return result


KERNELS = [("tiled", tiled), ("hoisted loads", hoisted), ("block free dims", block_free),
           ("fully blocked", fully_blocked)]

# AWS's matrix-multiplication tutorial (general/nki/tutorials/matrix_multiplication.rst up to
# Neuron SDK 2.23): latency in ms on trn1.32xlarge, BF16.
PUBLISHED_TRN1_BF16_MS = {"tiled": 51.80, "hoisted loads": 42.96, "block free dims": 22.07,
                          "fully blocked": 6.97}
# AWS's kernel-optimization tutorial (nki/guides/tutorials/kernel-optimization.rst, Neuron SDK
# 2.32): engines' active time in %, trn2, FP32.
PUBLISHED_TRN2_FP32_ACTIVE = {
    "tiled": {"dma": 99.93, "tensor": 87.28},
    "hoisted loads": {"dma": 99.73, "tensor": 99.85},
    "block free dims": {"tensor": 99.52, "dma": 95.70},
    "fully blocked": {"dma": 21.54, "tensor": 99.50, "vector": 10.55},
}


def profile(fn, target, dtype):
    import torch

    kernel = nki.jit(fn, platform_target=target)
    lhsT = torch.empty((K, M), dtype=dtype, device="meta")
    rhs = torch.empty((K, N), dtype=dtype, device="meta")
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as spilled:
        warnings.simplefilter("always", nki.NkiSpillWarning)
        spec = kernel.specialize((lhsT, rhs), {})
    timeline = spec.timeline()
    run = nki.KernelRun(timeline, (), spec.spills)
    return run, len(spilled), time.perf_counter() - t0


def rows():
    import torch

    out = []
    for name, fn in KERNELS:
        run, spills, secs = profile(fn, "trn1", torch.bfloat16)
        ms = run.makespan_ns / 1e6
        pub = PUBLISHED_TRN1_BF16_MS[name]
        run2, spills2, secs2 = profile(fn, "trn2", torch.float32)
        active = {e: 100 * run2.utilization[e] for e in ("dma", "tensor", "vector")}
        out.append(dict(name=name, ms=ms, published_ms=pub, ratio=ms / pub,
                        active=active, published_active=PUBLISHED_TRN2_FP32_ACTIVE[name],
                        spills=(spills, spills2), seconds=secs + secs2))
    return out


def markdown(results):
    lines = ["| kernel (ours, same algorithm) | trn1 BF16: modelled ms | AWS published ms | "
             "modelled / published | trn2 FP32: modelled active % (DMA / Tensor / Vector) | "
             "AWS published active % |", "|---|---|---|---|---|---|"]
    for r in results:
        a, p = r["active"], r["published_active"]
        pub = " / ".join(f"{e} {v:.2f}" for e, v in p.items())
        lines.append(f"| {r['name']} | {r['ms']:.2f} | {r['published_ms']:.2f} | "
                     f"{r['ratio']:.2f} | {a['dma']:.1f} / {a['tensor']:.1f} / {a['vector']:.1f} "
                     f"| {pub} |")
    return "\n".join(lines)


BEGIN = "<!-- nki-profiles:begin (generated by bench/nki_profiles.py --write) -->"
END = "<!-- nki-profiles:end -->"

if __name__ == "__main__":
    results = rows()
    table = markdown(results)
    print(table)
    for r in results:
        print(f"{r['name']}: traced and timed in {r['seconds']:.1f} s; spill warnings {r['spills']}")
    if "--write" in sys.argv:
        doc = os.path.join(os.path.dirname(__file__), "..", "docs", "nki.md")
        text = open(doc).read()
        block = f"{BEGIN}\n\n{table}\n\n{END}"
        if BEGIN in text:
            text = text[:text.index(BEGIN)] + block + text[text.index(END) + len(END):]
        else:
            raise SystemExit(f"docs/nki.md has no {BEGIN} marker")
        open(doc, "w").write(text)
