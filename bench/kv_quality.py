"""What --kv-type q8_0 costs in quality: perplexity and top-1 agreement
against f16 K/V on a fixed long text, with the real models.

    python3 bench/kv_quality.py [--models M1.gguf M2.gguf] [--ctx 4096] [--windows 4]

The text is the concatenation of Debian's license texts (GPL-3,
Apache-2.0, MPL-2.0, LGPL-2.1 from /usr/share/common-licenses: fixed,
public, ~90 KB of English prose; its SHA-256 is printed) or --text FILE.
For each model, `strata perplexity` scores windows of --ctx tokens (each
a fresh sequence, the first 64 positions unscored) once with f16 K/V and
once with q8_0, writing each scored position's argmax id; the script
prints both perplexities and the share of positions whose top-1 token
agrees. Positions deep in a window read the most quantized K/V, so the
agreement is also given for the last quarter of each window. --floor adds
the noise floor: f16 again at the AVX2 kernel level (STRATA_CPU=avx2,
other rounding, the same K/V type) against the default level: top-1
flips that any change of rounding causes on this model and text."""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
LICENSES = ["GPL-3", "Apache-2.0", "MPL-2.0", "LGPL-2.1"]
MODELS = ["models/SmolLM2-135M-Instruct.Q4_1.gguf", "models/gemma-3-270m-q4_k_m.gguf"]


def default_text(tmp):
    path = os.path.join(tmp, "licenses.txt")
    with open(path, "wb") as out:
        for name in LICENSES:
            with open(os.path.join("/usr/share/common-licenses", name), "rb") as f:
                out.write(f.read())
    return path


def score(model, text, kv_type, args, tmp, level=None):
    top1 = os.path.join(tmp, f"{os.path.basename(model)}.{kv_type}.{level}.top1")
    cmd = [os.path.join(ROOT, "strata"), "perplexity", "-m", model, "-f", text, "--ctx", str(args.ctx),
           "--windows", str(args.windows), "--kv-type", kv_type, "--top1", top1, "-t", str(args.threads)]
    env = dict(os.environ, STRATA_CPU=level) if level else None
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    res = json.loads(out.strip().splitlines()[-1])
    with open(top1, "rb") as f:
        res["top1"] = f.read()
    return res


def agreement(a, b, per_window, tail_from):
    n = len(a) // 4
    ids = lambda x, i: x[4 * i:4 * i + 4]
    same = sum(ids(a, i) == ids(b, i) for i in range(n))
    tail = [i for i in range(n) if i % per_window >= tail_from]
    same_tail = sum(ids(a, i) == ids(b, i) for i in tail)
    return same / n, same_tail / len(tail), n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--text")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--floor", action="store_true", help="also f16 at the avx2 level against the default level")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        text = args.text or default_text(tmp)
        sha = hashlib.sha256(open(text, "rb").read()).hexdigest()
        print(f"text: {text if args.text else '+'.join(LICENSES)} sha256 {sha[:16]}; windows of {args.ctx} tokens")
        print("| model | tokens scored | ppl f16 | ppl q8_0 | Δppl | top-1 agree | top-1 agree, last quarter |"
              + (" floor: f16 avx2 vs default, all / last quarter |" if args.floor else ""))
        print("|---|---|---|---|---|---|---|" + ("---|" if args.floor else ""))
        for m in args.models:
            m = m if os.path.isabs(m) else os.path.join(ROOT, m)
            if not os.path.exists(m):
                print(f"| {os.path.basename(m)} | not downloaded | | | | | |")
                continue
            f16, q8 = score(m, text, "f16", args, tmp), score(m, text, "q8_0", args, tmp)
            per_window = args.ctx - 1 - 64
            all_, tail, n = agreement(f16["top1"], q8["top1"], per_window, per_window - per_window // 4)
            d = q8["ppl"] - f16["ppl"]
            floor = ""
            if args.floor:
                f2 = score(m, text, "f16", args, tmp, level="avx2")
                fa, ft, _ = agreement(f16["top1"], f2["top1"], per_window, per_window - per_window // 4)
                floor = f" {100 * fa:.2f}% / {100 * ft:.2f}% (ppl {f2['ppl']:.4f}) |"
            print(f"| {os.path.basename(m)} | {n} | {f16['ppl']:.4f} | {q8['ppl']:.4f} | {d:+.4f} ({100 * d / f16['ppl']:+.2f}%) "
                  f"| {100 * all_:.2f}% | {100 * tail:.2f}% |{floor}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
