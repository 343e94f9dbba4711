#!/usr/bin/env python3
"""Reference logits from llama.cpp (through llama-cpp-python), for the
engine's exactness tests against the real default model.

    python3 tools/oracle_refs.py --model models/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --out tests/data/oracle

For each prompt NN (00, 01, ...) it writes
  NN.prompt  the prompt text, raw UTF-8 bytes (no trailing newline added);
  NN.txt     token ids, the positions whose full logits are in NN.bin, the
             argmax and top-K logits at every position (format below);
  NN.bin     full logit rows, little-endian float32, n_rows x n_vocab, rows
             in the order of the "rows" line.
and index.txt listing the prompts. Tokens come from llama.cpp's own
tokenizer (parse_special = true, no BOS: the model's add_bos is false), so
the files also pin the tokenizer down.

NN.txt, one item per line, '#' lines are comments:
  name <name>
  n_vocab <n>
  n_tokens <n>
  tokens <id> <id> ...            (n_tokens ids)
  rows <pos> <pos> ...            (positions stored in NN.bin, ascending)
  argmax <id> <id> ...            (argmax of the logits at each position)
  top_k <K>
  top <pos> <id> <logit> ... (K pairs, best first; then n_tokens such lines)
Logits are printed with 9 significant digits, which round-trips float32.

With --tiny DIR it instead does the same for the tiny generated models in
DIR (tools/testdata_models.py) into OUT/tiny/<model>/, one short chat
prompt each, every position stored, plus the model file's SHA-256 so a
test can tell when the regenerated fixture no longer matches. --only NAME
redoes one model and keeps the other entries of the index.

With --gemma3 it does the same for Gemma 3 270M (make oracle-refs-gemma3)
into OUT (tests/data/oracle/gemma3): Gemma-format prompts, BOS added (the
model's add_bos is true), one full row per prompt (the last position: a
262,144-token vocabulary makes each row 1 MiB) and the top-K at every
position, which the C test compares as well. Two prompts are longer than
the 512-token sliding window, so local layers must mask old positions.

Does not: run in `make test` (it needs llama-cpp-python and minutes of
CPU); the outputs are committed.
"""
import argparse
import hashlib
import os
import random
import sys

import numpy as np

TOP_K = 10

# ---------------------------------------------------------------------------
# Prompts
# ---------------------------------------------------------------------------

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

PARAGRAPHS = [
    "The history of computing is a history of caches. Every time a machine "
    "got faster, the memory behind it stayed slow, and engineers put a "
    "smaller, quicker store in between. Registers, L1, L2, RAM, disk: each "
    "tier holds what the one above is likely to ask for next.",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"
    "    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n"
    "    return a\n\nprint([fibonacci(i) for i in range(10)])\n",
    "Le cache d'un serveur d'inférence garde les clés et les valeurs de "
    "l'attention, afin de ne jamais recalculer le même préfixe deux fois.",
    "Der schnelle braune Fuchs springt über den faulen Hund. Größe, Maß, "
    "Straße und Übermut sind Wörter mit Umlauten.",
    "机器学习模型在推理时需要大量的内存。缓存可以避免重复计算。",
    "東京は日本の首都です。今日はいい天気ですね。",
    "Привет, мир! Это пример текста на русском языке.",
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
    "\"unit\": \"celsius\", \"days\": [1, 2, 3]}, \"ok\": true, \"n\": null}",
    "static int sum(const int *x, size_t n) {\n\tint s = 0;\n\tfor (size_t i "
    "= 0; i < n; i++)\n\t\ts += x[i];\n\treturn s;\n}\n",
    "1. Preheat the oven to 180°C (350°F).\n2. Mix 250 g of flour with 2 "
    "eggs.\n3. Bake for 25-30 minutes, then let it cool for 10 minutes.",
    "Once upon a time, in a small village by the sea, there lived an old "
    "fisherman who had never caught a single fish. Every morning he rowed "
    "out, and every evening he came back with stories instead.",
    "    Indented   text   with    irregular   spacing,\ttabs,\t\tand\n\n\n"
    "blank lines; punctuation!?... (parentheses) [brackets] {braces} <tags>",
    "User: can you refactor this loop?\nAssistant: Sure. Replace the index "
    "arithmetic with an iterator and hoist the invariant out of the body.",
    "The year 2024 had 366 days; 3.14159 is close to pi, 2.71828 to e, and "
    "1,000,000 is a million. Call +1-555-0100 or mail a@b.example.",
    "🙂 Emoji 🚀 and symbols ✓ → ∑ ∞ ≠ ≤ ≥ © ® ™ mixed with text.",
]


def chat(turns, generation=True):
    """ChatML text exactly as SmolLM2's template renders it."""
    out = ""
    if turns[0][0] != "system":
        out += f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
    for role, content in turns:
        out += f"<|im_start|>{role}\n{content}<|im_end|>\n"
    return out + ("<|im_start|>assistant\n" if generation else "")


TOOLS_JSON = (
    '[{"type": "function", "function": {"name": "read_file", "description": '
    '"Read a file from the workspace", "parameters": {"type": "object", '
    '"properties": {"path": {"type": "string"}}, "required": ["path"]}}}]'
)


def short_prompts():
    return [
        ("single-token", "Hello"),
        ("capital", "The capital of France is"),
        ("code-python", PARAGRAPHS[1]),
        ("chat-simple", chat([("user", "What is 2+2?")])),
        ("chat-system", chat([("system", "You are a terse assistant."),
                              ("user", "Name three primary colors."),
                              ("assistant", "Red, yellow, blue."),
                              ("user", "And secondary?")])),
        ("multilingual", " ".join(PARAGRAPHS[2:7])),
        ("numbers-punct", PARAGRAPHS[13] + "\n" + PARAGRAPHS[14]),
        ("whitespace", PARAGRAPHS[11]),
        ("code-c", PARAGRAPHS[8] * 3),
        ("chat-tools", chat([("system", "You can call tools:\n" + TOOLS_JSON),
                             ("user", "Open src/main.c and summarize it."),
                             ("assistant", '<tool_call>\n{"name": "read_file", '
                              '"arguments": {"path": "src/main.c"}}\n</tool_call>'),
                             ("tool", PARAGRAPHS[8])])),
        ("repetition", "the cache " * 60),
    ]


def long_text(tokenize, target, seed):
    """Paragraphs in a seeded order until the text has >= target tokens."""
    rng = random.Random(seed)
    parts, n = [], 0
    while n < target:
        parts.append(rng.choice(PARAGRAPHS))
        n = len(tokenize("\n\n".join(parts)))
    return "\n\n".join(parts)


def long_prompts(tokenize):
    body = long_text(tokenize, 1900, seed=3)
    return [
        ("long-500", long_text(tokenize, 500, seed=1)),
        ("long-1000", long_text(tokenize, 1000, seed=2)),
        ("long-chat-2000", chat([("user", "Summarize the following notes.\n\n" + body)])),
    ]


# ---------------------------------------------------------------------------
# Running llama.cpp and writing the files
# ---------------------------------------------------------------------------


def gemma_chat(turns, generation=True):
    """Gemma 3's chat format (its template folds a system turn into the
    first user turn)."""
    out, sys_text = "", ""
    for role, content in turns:
        if role == "system":
            sys_text = content + "\n\n"
            continue
        who = "model" if role == "assistant" else "user"
        out += f"<start_of_turn>{who}\n{sys_text}{content}<end_of_turn>\n"
        sys_text = ""
    return out + ("<start_of_turn>model\n" if generation else "")


def gemma3_prompts(tokenize):
    body = long_text(tokenize, 1400, seed=5)
    return [
        ("capital", "The capital of France is"),
        ("code-python", PARAGRAPHS[1]),
        ("chat-simple", gemma_chat([("user", "What is 2+2?")])),
        ("chat-system", gemma_chat([("system", "You are a terse assistant."),
                                    ("user", "Name three primary colors."),
                                    ("assistant", "Red, yellow, blue."),
                                    ("user", "And secondary?")])),
        ("multilingual", " ".join(PARAGRAPHS[2:7]) + " " + PARAGRAPHS[14]),
        ("long-800", long_text(tokenize, 800, seed=4)),
        ("long-chat-1500", gemma_chat([("user", "Summarize the following notes.\n\n" + body)])),
    ]


def make_gemma3_refs(args):
    os.makedirs(args.out, exist_ok=True)
    llm = load(args.model, 4096, args.threads)
    tok = lambda text: llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
    index = [f"# NN name n_tokens n_rows (llama-cpp-python {llama_version()}, "
             f"model {os.path.basename(args.model)})"]
    for i, (name, text) in enumerate(gemma3_prompts(tok)):
        ids = tok(text)
        logits = run_prompt(llm, ids)
        rows = [len(ids) - 1]
        write_ref(args.out, f"{i:02d}", name, text, ids, logits, rows)
        index.append(f"{i:02d} {name} {len(ids)} {len(rows)}")
        print(f"oracle: gemma3 {i:02d} {name}: {len(ids)} tokens, rows {rows}")
    with open(os.path.join(args.out, "index.txt"), "w") as f:
        f.write("\n".join(index) + "\n")


# --kv-type: llama.cpp's K/V cache types (ggml_type ids); a quantized V
# needs flash attention, whose CPU path quantizes Q to q8_0 for q8_0 K.
KV_TYPES = {"f16": 1, "q8_0": 8}
KV_TYPE = "f16"


def load(path, n_ctx, threads):
    try:
        import llama_cpp
    except ImportError:
        sys.exit("llama-cpp-python not installed: pip install llama-cpp-python")
    kv = {} if KV_TYPE == "f16" else {"type_k": KV_TYPES[KV_TYPE], "type_v": KV_TYPES[KV_TYPE], "flash_attn": True}
    return llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_threads=threads,
                           n_threads_batch=threads, n_batch=512, n_ubatch=512,
                           logits_all=True, verbose=False, **kv)


def tokenizer_of(llm):
    return lambda text: llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)


def run_prompt(llm, ids):
    """Logits for every position of ids, from an empty cache."""
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[: len(ids)], dtype=np.float32)


def pick_rows(n, n_rows):
    """n_rows positions spread over [0, n): first, last, block edges."""
    if n <= n_rows:
        return list(range(n))
    want = {0, n - 1}
    for edge in (63, 64, 511, 512, 1023, 1024):
        if len(want) < n_rows - 2 and edge < n - 1:
            want.add(edge)
    k = 1
    while len(want) < n_rows:
        want.add(round(k * (n - 1) / n_rows))
        k += 1
    return sorted(want)[:n_rows]


def write_ref(outdir, stem, name, text, ids, logits, rows):
    with open(os.path.join(outdir, stem + ".prompt"), "wb") as f:
        f.write(text.encode("utf-8"))
    logits[rows].astype("<f4").tofile(os.path.join(outdir, stem + ".bin"))
    top = np.argsort(-logits, axis=1, kind="stable")[:, :TOP_K]
    lines = [f"# strata oracle v1 (tools/oracle_refs.py); NN.bin = rows x n_vocab <f4",
             f"name {name}", f"n_vocab {logits.shape[1]}", f"n_tokens {len(ids)}",
             "tokens " + " ".join(map(str, ids)),
             "rows " + " ".join(map(str, rows)),
             "argmax " + " ".join(str(int(a)) for a in logits.argmax(axis=1)),
             f"top_k {TOP_K}"]
    for p in range(len(ids)):
        pairs = " ".join(f"{int(t)} {logits[p, t]:.9g}" for t in top[p])
        lines.append(f"top {p} {pairs}")
    with open(os.path.join(outdir, stem + ".txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def n_rows_for(n_tokens):
    if KV_TYPE != "f16":  # a second suite: first and last rows (the argmax and top-K stay at every position)
        return 2
    return 8 if n_tokens >= 400 else 4


def make_refs(args):
    os.makedirs(args.out, exist_ok=True)
    llm = load(args.model, 4096, args.threads)
    tok = tokenizer_of(llm)
    prompts = short_prompts() + long_prompts(tok)
    index = [f"# NN name n_tokens n_rows (llama-cpp-python {llama_version()}, "
             f"model {os.path.basename(args.model)})"]
    for i, (name, text) in enumerate(prompts):
        ids = tok(text)
        logits = run_prompt(llm, ids)
        rows = pick_rows(len(ids), n_rows_for(len(ids)))
        write_ref(args.out, f"{i:02d}", name, text, ids, logits, rows)
        index.append(f"{i:02d} {name} {len(ids)} {len(rows)}")
        print(f"oracle: {i:02d} {name}: {len(ids)} tokens, rows {rows}")
    with open(os.path.join(args.out, "index.txt"), "w") as f:
        f.write("\n".join(index) + "\n")


def harmony_prompt():
    """gpt-oss (harmony) chat text long enough (~300 tokens in the tiny
    vocabulary) to pass the sliding window of 128."""
    user = " ".join(PARAGRAPHS[:3]) + " Hello there, how are you today? 42!"
    return ("<|start|>system<|message|>You are a helpful assistant.\nReasoning: medium<|end|>"
            f"<|start|>user<|message|>{user}<|end|><|start|>assistant")


def make_tiny_refs(args):
    """Every position of one chat prompt for each tiny fixture model (gpt-oss
    models: a longer harmony prompt)."""
    out = os.path.join(args.out, "tiny")
    os.makedirs(out, exist_ok=True)
    chatml = chat([("user", "Hello there, how are you today? 42!")])
    index = ["# model n_tokens sha256 (tools/oracle_refs.py --tiny)"]
    keep = {}
    if args.only:  # other models' refs stay as committed
        with open(os.path.join(out, "index.txt")) as f:
            keep = {ln.split()[0]: ln.rstrip("\n") for ln in f if ln.strip() and not ln.startswith("#")}
    for fn in sorted(os.listdir(args.tiny)):
        if not fn.endswith(".gguf"):
            continue
        if args.only and fn[: -len(".gguf")] != args.only:
            if fn[: -len(".gguf")] in keep:
                index.append(keep[fn[: -len(".gguf")]])
            continue
        path = os.path.join(args.tiny, fn)
        harmony = fn.startswith("gpt-oss")
        text = harmony_prompt() if harmony else chatml
        llm = load(path, 1024 if harmony else 256, args.threads)
        ids = tokenizer_of(llm)(text)
        logits = run_prompt(llm, ids)
        stem = fn[: -len(".gguf")]
        write_ref(out, stem, stem, text, ids, logits, list(range(len(ids))))
        index.append(f"{stem} {len(ids)} {sha256(path)}")
        llm.close()
        print(f"oracle: tiny {stem}: {len(ids)} tokens")
    with open(os.path.join(out, "index.txt"), "w") as f:
        f.write("\n".join(index) + "\n")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def llama_version():
    try:
        import llama_cpp
        return llama_cpp.__version__
    except ImportError:
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--out", default="tests/data/oracle")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tiny", metavar="DIR",
                    help="make refs for the tiny models in DIR instead (e.g. tests/data/gen/models)")
    ap.add_argument("--only", metavar="NAME",
                    help="with --tiny: redo only this model (e.g. qwen35-f32), keep the others' refs")
    ap.add_argument("--gemma3", action="store_true",
                    help="--model is Gemma 3 270M: its prompts and row layout (see above)")
    ap.add_argument("--kv-type", choices=sorted(KV_TYPES), default="f16",
                    help="llama.cpp's K/V type (q8_0: flash attention on), for the q8_0 K/V suites "
                         "(tests/data/oracle/kv-q8_0, tests/data/oracle/gemma3/kv-q8_0)")
    args = ap.parse_args()
    global KV_TYPE
    KV_TYPE = args.kv_type
    if args.gemma3:
        make_gemma3_refs(args)
    elif args.tiny:
        make_tiny_refs(args)
    else:
        make_refs(args)


if __name__ == "__main__":
    main()
