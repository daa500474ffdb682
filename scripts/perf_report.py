#!/usr/bin/env python3
"""Writes docs/performance.md from the Google Benchmark JSON of one run per column.

Every benchmark is named area/impl/shape...: impl "inferkit..." is a fast path; "naive",
"padded", "memread", "default", "fmapeak", "llamacpp" (and anything starting "base") is a
baseline measured beside it in the same binary and the same run. A table per benchmark binary
pairs each fast path with the baselines of the same area and shape and gives the ratio
baseline time / fast time (for memread and fmapeak: the fraction of that floor reached).

Usage:
  scripts/perf_report.py [--run LABEL=DIR]... [--out FILE]
  scripts/perf_report.py                      # one column from build/bench (scripts/bench.sh)
  scripts/perf_report.py --run avx512=build/bench --run avx2=build/bench-avx2 --out docs/performance.md

Each DIR holds <binary>.json files and machine.txt (one line: CPU, ISA, date, load), which
scripts/bench.sh writes. Figures come only from the given runs: nothing is carried over.
"""
import argparse
import glob
import json
import os
import re
import sys

BASELINES = ("naive", "padded", "memread", "default", "fmapeak", "llamacpp", "eigen", "read")
FLOORS = ("memread", "fmapeak", "read")  # a floor, not a competitor: report the fraction reached
COUNTERS = ("GFLOPS", "GOPS", "GBps", "GB/s", "MBps", "tokens_per_s", "out_tok_per_s", "bytes_per_s",
            "err_rel_rms", "p50_us", "p99_us", "max_us", "best_us", "x_layer", "accepted_per_pass")

# What each binary measures, in one or two sentences (the table says the rest).
FAMILIES = {
    "core": "SIMD primitives and 16-bit conversions over 16,384 floats (L2-resident) against scalar loops.",
    "attention": "Exact attention: causal prefill (GFLOPS = 4 Tq Tk d Hq / 2) against a row-at-a-time "
                 "kernel, and split-KV decode against `memread` (reading the same K/V bytes once).",
    "attention_batch": "One `attention_batch` call over a serving iteration's mixed rows against one call "
                       "per sequence, and the batch-invariant mode against the default.",
    "kv": "Decode over every cache encoding (f32, bf16, f16, int8, int4, KIVI; dense and paged) against "
          "`memread` of the same bytes, and the reduced decode arithmetic against exact.",
    "sampling": "Decoding rules and chains at vocabularies up to 256k against sort-based references "
                "(`naive`: the definitions of sampling/reference.hpp).",
    "speculative": "Exact speculative verification against a naive implementation of the same rule.",
    "search": "Beam, contrastive search and contrastive decoding steps against naive implementations.",
    "prefix": "Prefix trie match / insert / eviction against a linear scan.",
    "quant": "Quantized matrix-vector and matrix-matrix products against Eigen's f32 products and "
             "`memread` of the weight bytes.",
    "serving": "Scheduler overhead per iteration, and the llama2.c serving loop: continuous batching "
               "against sequential and static batching.",
    "steering": "Residual-stream edits at d = 4096 against naive loops.",
    "moe": "Routing, capacity, dispatch and combine against naive loops and `memread`/memcpy of the same bytes.",
    "distributed": "MPI exchanges (expert-parallel all-to-all, context-parallel decode) against a single process.",
    "runner": "The llama2.c runner per token.",
    "tokenizer": "Tokenizer encode / decode throughput against the quadratic merge loop; GGUF open against a "
                 "plain read of the same bytes.",
    "grammar": "Grammar-constrained token masks against the naive per-token recognizer.",
    "ggml-quant": "GGUF weight types (Q8_0, Q4_0, K-quants, ...): matvec against Eigen's f32 matvec and `memread` of "
                  "the same weight bytes, prefill matmul against Eigen's f32 GEMM.",
    "mla": "Multi-head latent attention decode against materialized-K/V attention over the same tokens, against "
           "`fmapeak`; sink logits against the same call without.",
}


PARTIAL = set()  # binaries stopped by a time limit (scripts/bench.sh INFERKIT_BENCH_TIMEOUT)


def load_run(path):
    """name -> (time in µs, counters) for every benchmark of every JSON file in `path`."""
    runs = {}
    files = sorted(glob.glob(os.path.join(path, "*.json")))
    if not files:
        sys.exit(f"perf_report: no JSON files in {path}")
    scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
    for f in files:
        binary = os.path.basename(f)[:-5]
        with open(f) as fh:
            text = fh.read()
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            # A binary stopped by a time limit leaves the benchmarks finished so far: keep those.
            cut = text.rfind("\n    }")
            try:
                data = json.loads(text[:cut + 6] + "\n  ]\n}") if cut > 0 else None
            except json.JSONDecodeError:
                data = None
            if data is None:
                print(f"perf_report: {f}: no finished benchmark ({e}); left out", file=sys.stderr)
                PARTIAL.add(binary)
                continue
            print(f"perf_report: {f}: truncated, kept {len(data.get('benchmarks', []))} benchmarks", file=sys.stderr)
            PARTIAL.add(binary)
        for b in data.get("benchmarks", []):
            if b.get("error_occurred"):
                continue
            agg = b.get("aggregate_name")
            if agg not in (None, "median"):
                continue
            name = re.sub(r"/(real_time|manual_time|process_time)$", "", b.get("run_name", b["name"]))
            if agg is None and (binary, name) in runs and runs[(binary, name)][2]:
                continue  # the median of repetitions is already there
            us = b["real_time"] * scale[b.get("time_unit", "ns")]
            counters = {k: v for k, v in b.items() if k in COUNTERS and isinstance(v, (int, float))}
            runs[(binary, name)] = (us, counters, agg == "median")
    return runs


def machine_line(path):
    p = os.path.join(path, "machine.txt")
    return open(p).read().strip() if os.path.exists(p) else "machine not recorded (no machine.txt)"


def split(name):
    parts = name.split("/")
    return (parts[0], parts[1], "/".join(parts[2:])) if len(parts) >= 3 else (parts[0], "", "")


def is_baseline(impl):
    return impl in BASELINES or impl.startswith("base")


def fmt_time(us):
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e3:
        return f"{us / 1e3:.2f} ms"
    if us >= 10:
        return f"{us:.0f} µs"
    return f"{us:.2f} µs"


def fmt_counters(c):
    out = []
    for k in COUNTERS:
        if k in c:
            v = c[k]
            out.append(f"{k} {v:.3g}")
        if len(out) == 2:
            break
    return ", ".join(out)


def ratio_text(impl, tb, tf):
    if tf <= 0:
        return "-"
    r = tb / tf
    return f"{r:.2f} of {impl}" if impl in FLOORS else f"{r:.2f}x"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", action="append", default=[], help="LABEL=DIR (repeat for columns)")
    ap.add_argument("--out", default="-", help="output file (default: stdout)")
    ap.add_argument("--title", default="Performance")
    args = ap.parse_args()
    specs = args.run or ["run=build/bench"]
    labels, runs, machines = [], [], []
    for s in specs:
        if "=" not in s:
            sys.exit(f"perf_report: --run {s!r}: expected LABEL=DIR")
        label, path = s.split("=", 1)
        labels.append(label)
        runs.append(load_run(path))
        machines.append(machine_line(path))

    # Every (binary, area, shape) -> impls, over all runs.
    keys = {}
    for r in runs:
        for (binary, name) in r:
            area, impl, shape = split(name)
            keys.setdefault(binary, {}).setdefault((area, shape), set()).add(impl)

    lines = [f"# {args.title}", "",
             "Generated by `scripts/perf_report.py` from the JSON of the runs below; regenerate it, do not edit it "
             "(history is in CHANGELOG.md). Each ratio compares a fast path with the baseline measured in the same "
             "binary and the same run: baseline time / fast time, or, against a floor (`memread`: reading the same "
             "bytes once; `fmapeak`: an FMA-only loop), the fraction of the floor reached. The machines are shared "
             "2-core virtual machines: absolute times move 10-40% between runs, ratios much less.", ""]
    for label, m in zip(labels, machines):
        lines.append(f"- **{label}**: {m}")
    if PARTIAL:
        lines.append(f"- Stopped by the run's time limit, so only their first benchmarks are here: "
                     f"{', '.join(f'`{b}`' for b in sorted(PARTIAL))}.")
    lines.append("")

    for binary in sorted(keys):
        lines.append(f"## `inferkit-bench-{binary}`")
        lines.append("")
        if binary in FAMILIES:
            lines += [FAMILIES[binary], ""]
        head = "| benchmark | baseline |" + "".join(f" {l}: time | {l}: baseline | {l}: ratio |" for l in labels)
        lines += [head, "|---|---|" + "---|---|---|" * len(labels)]
        singles = []
        for (area, shape), impls in sorted(keys[binary].items()):
            fast = sorted(i for i in impls if not is_baseline(i))
            base = sorted(i for i in impls if is_baseline(i))
            for f in fast:
                fname = f"{area}/{f}/{shape}" if shape else f"{area}/{f}"
                if not base:
                    singles.append(fname)
                    continue
                for b in base:
                    bname = f"{area}/{b}/{shape}" if shape else f"{area}/{b}"
                    cells = []
                    for r in runs:
                        if (binary, fname) in r and (binary, bname) in r:
                            tf, cf, _ = r[(binary, fname)]
                            tb, _, _ = r[(binary, bname)]
                            ctr = fmt_counters(cf)
                            cells.append(f" {fmt_time(tf)}{' (' + ctr + ')' if ctr else ''} | {fmt_time(tb)} | "
                                         f"{ratio_text(b, tb, tf)} |")
                        else:
                            cells.append(" - | - | - |")
                    lines.append(f"| `{fname}` | {b} |" + "".join(cells))
        lines.append("")
        if singles:
            lines += ["Without a same-shape baseline (counters are the figure):", "",
                      "| benchmark |" + "".join(f" {l} |" for l in labels), "|---|" + "---|" * len(labels)]
            for n in singles:
                cells = []
                for r in runs:
                    if (binary, n) in r:
                        t, c, _ = r[(binary, n)]
                        ctr = fmt_counters(c)
                        cells.append(f" {fmt_time(t)}{' (' + ctr + ')' if ctr else ''} |")
                    else:
                        cells.append(" - |")
                lines.append(f"| `{n}` |" + "".join(cells))
            lines.append("")

    text = "\n".join(lines).rstrip() + "\n"
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
