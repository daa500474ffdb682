#!/usr/bin/env python3
"""Summarizes one run's Google Benchmark JSON (build/bench/*.json) as Markdown tables.

Benchmarks are named area/impl/shape: impl "inferkit..." is a fast path, "naive", "padded",
"memread" or "default" the baseline measured beside it in the same binary. Each fast path is
paired with the baselines of the same area and shape, and the ratio baseline time / fast time is
computed from this run only (no figures from other days).

Usage: scripts/bench_summary.py [json_dir] [--all]
  default: the headline table (one line per headline benchmark); --all: every pair.
"""
import glob
import json
import os
import re
import sys

BASELINES = ("naive", "padded", "memread", "default")
# Counters worth a column, in order of preference (first present wins).
COUNTERS = ("GFLOPS", "GOPS", "GBps", "GB/s", "tokens_per_s", "out_tok_per_s", "bytes_per_s",
            "err_rel_rms", "best_us", "x_layer")
# Headline benchmarks: regexes on the fast path's full name, with a line title each, and, where
# the baseline's name differs from the fast path's by more than the impl field, a substitution
# (regex, replacement) that turns the fast path's name into the baseline's.
HEADLINES = [
    (r"^attention_prefill/inferkit/.*threads:2$", "causal prefill attention, T 2048, 2 threads"),
    (r"^attention_decode/inferkit/Hq32_Hkv8_D128_f32/Tk:32768/threads:2$", "decode attention f32, 32k keys (vs memory read)"),
    (r"^attention_decode/inferkit/Hq32_Hkv8_D128_bf16/Tk:32768/threads:2$", "decode attention bf16, 32k keys (vs memory read)"),
    (r"^attention_varlen/inferkit/.*threads:2$", "varlen batch vs padded batch, 2 threads"),
    (r"^attention_batch/inferkit/chunk2000\+decode63.*threads:2$", "mixed batch (2,000-token chunk + 63 decode rows) vs one call each"),
    (r"^attention_decode/inferkit/Tk32768_.*_int8$", "decode over an int8 KV cache, 32k keys (vs memory read)"),
    (r"^attention_decode/inferkit/Tk32768_.*_int4$", "decode over an int4 KV cache, 32k keys (vs memory read)"),
    (r"^sampling/inferkit/V128256_chain/.*sigma:3$", "sampler chain, V = 128256"),
    (r"^sampling/inferkit/V128256_topp095/.*sigma:3$", "top-p 0.95, V = 128256"),
    (r"^sampling/inferkit/V128256_llamachain/.*sigma:3$", "llama.cpp-style full chain, V = 128256"),
    (r"^sampling/inferkit/V128256_dry4096loop/.*sigma:3$", "DRY over a 4,096-token loop"),
    (r"^speculative/inferkit/V:128256/k:4/reject_first:0$", "speculative verification, V = 128256, k = 4"),
    (r"^prefix_trie/inferkit/match_insert", "prefix trie match + insert"),
    (r"^quant/inferkit/matvec_int8/4096x4096/threads:1$", "int8 weight matvec 4096^2 vs Eigen f32",
     (r"/inferkit/matvec_int8/", "/naive/matvec_f32_eigen/")),
    (r"^quant/inferkit/matvec_int4_q8/4096x4096/threads:1$", "int4 weights, int8 activations matvec vs Eigen f32",
     (r"/inferkit/matvec_int4_q8/", "/naive/matvec_f32_eigen/")),
    (r"^quant/inferkit/matmul_w8a8/512x4096x4096/threads:1$", "W8A8 GEMM 512x4096x4096 vs Eigen f32 GEMM",
     (r"/inferkit/matmul_w8a8/", "/naive/matmul_f32_eigen/")),
    (r"^quant/inferkit/runner_int8/.*threads:1$", "runner with int8 weights vs f32",
     (r"/inferkit/runner_int8/", "/naive/runner_f32/")),
    (r"^runner/inferkit/.*threads:1$", "llama2.c runner step"),
    (r"^moe/inferkit/.*dispatch_combine.*E64.*threads:2", "MoE dispatch + combine (E 64, k 8)"),
    (r"^serving/inferkit/overhead/policy:1/waiting:1024$", "scheduler overhead per iteration, LPM, 1,024 waiting"),
    (r"^steering/inferkit/.*ablate", "directional ablation, d = 4096"),
]


def load(json_dir):
    """name -> (time in µs, counters) from every JSON file; medians when repetitions ran."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(json_dir, "*.json"))):
        with open(path) as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError as e:
                sys.exit(f"bench_summary: {path}: not JSON ({e})")
        scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
        for b in data.get("benchmarks", []):
            if b.get("error_occurred"):
                continue
            agg = b.get("aggregate_name")
            if agg not in (None, "median"):
                continue
            name = re.sub(r"/(real_time|manual_time|process_time)$", "", b.get("run_name", b["name"]))
            if agg is None and name in runs and runs[name][2]:
                continue  # a median of this benchmark is already there
            us = b["real_time"] * scale[b.get("time_unit", "ns")]
            counters = {k: v for k, v in b.items() if k in COUNTERS}
            runs[name] = (us, counters, agg == "median")
    return runs


def split(name):
    parts = name.split("/")
    return (parts[0], parts[1], "/".join(parts[2:])) if len(parts) >= 3 else (None, None, None)


def pairs(runs):
    """(fast name, baseline name) for every fast path with a same-shape baseline."""
    by_key = {}
    for name in runs:
        area, impl, shape = split(name)
        if area:
            by_key.setdefault((area, shape), {})[impl] = name
    out = []
    for (area, shape), impls in sorted(by_key.items()):
        fast = [i for i in impls if i.startswith("inferkit")]
        base = [i for i in impls if i in BASELINES]
        for f in sorted(fast):
            for b in base:
                out.append((impls[f], impls[b]))
    return out


def fmt_time(us):
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} µs"


def fmt_counter(counters):
    for k in COUNTERS:
        if k in counters:
            v = counters[k]
            return f"{k} {v:.3g}" if isinstance(v, (int, float)) else f"{k} {v}"
    return ""


def row(runs, fast, base, title=None):
    tf, cf, _ = runs[fast]
    tb, _, _ = runs[base]
    impl = split(base)[1]
    ratio = tb / tf if tf > 0 else float("inf")
    what = "x faster" if impl != "memread" else "of the memory-read floor" if ratio < 1 else "x the floor"
    ratio_text = f"{ratio:.2f} {what}" if impl == "memread" else f"{ratio:.1f}{what}"
    label = title or fast
    return f"| {label} | {fmt_time(tf)} | {impl} {fmt_time(tb)} | {ratio_text} | {fmt_counter(cf)} |"


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    json_dir = args[0] if args else "build/bench"
    runs = load(json_dir)
    if not runs:
        sys.exit(f"bench_summary: no benchmark results in {json_dir}")
    all_pairs = pairs(runs)
    print("| benchmark | inferkit | baseline (same binary, same run) | ratio | counter |")
    print("|---|---|---|---|---|")
    if "--all" in sys.argv:
        for fast, base in all_pairs:
            print(row(runs, fast, base))
        return
    for pattern, title, *sub in HEADLINES:
        rx = re.compile(pattern)
        if sub:  # the baseline's name comes from the fast path's by a substitution
            fast = next((n for n in sorted(runs) if rx.search(n)), None)
            base = re.sub(sub[0][0], sub[0][1], fast) if fast else None
            match = (fast, base) if base in runs else None
        else:
            match = next(((f, b) for f, b in all_pairs if rx.search(f)), None)
        if match:
            print(row(runs, match[0], match[1], title))


if __name__ == "__main__":
    main()
