#!/usr/bin/env python3
"""Reference token ids from llama.cpp for the tokenizer tests.

Generates varied test strings (seeded: prose, code, numbers, whitespace
runs, CJK, accented and right-to-left text, emoji, text that looks like
special tokens, random valid UTF-8) and tokenizes each with llama.cpp
through llama-cpp-python (Llama(vocab_only=True).tokenize(add_bos=False,
special=...)). Writes one file per vocabulary to tests/data/tok/<name>.txt:

    # comment lines
    <special 0|1> <input as hex, "-" if empty> <ids, space-separated>

The files are committed, so `make test` needs no llama.cpp. Run once by a
developer after changing the strings or the fixtures:

    STRATA_MODEL=/path/SmolLM2-135M-Instruct.Q4_1.gguf python3 tools/tok_refs.py

With --only NAME it writes only tests/data/tok/NAME.txt (e.g. gpt4o,
gptoss). With --gemma3 MODEL it writes only tests/data/tok/gemma3.txt, from the real
Gemma 3 270M vocabulary (SPM, byte fallback, no space prefix, 262,144
tokens; make tok-refs-gemma3).

Vocabularies: the real SmolLM2 model (pre "smollm"), the same vocabulary
relabelled "llama-bpe", "qwen2", "qwen35" and "gpt-4o", and the synthetic SPM
vocabularies, all written by tools/testdata_tok.py into a temporary folder
first; and the tiny gpt-oss fixture's vocabulary with its harmony special
tokens (gptoss.txt, tools/testdata_gptoss.py).
"""
import os
import random
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import testdata_tok  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "data", "tok")

PROSE = """The quick brown fox jumps over the lazy dog. It's a truth universally
acknowledged that a single man in possession of a good fortune must be in want of a
wife. I'm sure they'll say we've done it, and you'd agree. DON'T SHOUT, it'S fine.
Hello, world! How are you today? Caching prefixes is what we're here for.""".split()

CODE = [
    'int main(int argc, char **argv) {\n    printf("hello %d\\n", argc);\n    return 0;\n}\n',
    'def f(x):\n\tif x > 10:\n\t\treturn x ** 2\n\treturn None\n',
    '{"model": "smollm2", "messages": [{"role": "user", "content": "hi"}], "n": 3}',
    '<html>\n  <body class="x">&nbsp;&lt;tag&gt; <a href="https://example.com/?q=1&b=2">link</a></body>\n</html>',
    'for (size_t i = 0; i < n; i++) { sum += a[i] * b[i]; } // dot\r\n',
    'SELECT id, name FROM users WHERE age >= 18 AND name LIKE \'%son\';',
    'x = [i*i for i in range(100) if i % 3 == 0]  # squares\n',
    '    \n\n\t\t  fn  main ( ) -> Result<(), Box<dyn Error>> {\n        Ok(())\n    }',
    '$ ls -la /usr/local/bin | grep -E "^d" && echo $? >> /tmp/log.txt 2>&1',
    '#include <stdio.h>\n#define MAX(a,b) ((a)>(b)?(a):(b))\n',
]

UNICODE = [
    "café naïve façade résumé coöperate Ärger Straße jalapeño",
    "Привет, мир! Как дела? Съешь же ещё этих мягких французских булок.",
    "Γειά σου κόσμε· ελληνικά κείμενα με τόνους.",
    "שלום עולם, זה טקסט בעברית.", "مرحبا بالعالم، هذا نص عربي.",
    "नमस्ते दुनिया", "สวัสดีชาวโลก", "Xin chào thế giới, tiếng Việt có dấu.",
    "你好，世界！这是一个中文句子。", "日本語のテキスト、カタカナとひらがな。東京タワー",
    "안녕하세요 세계! 한국어 문장입니다.", "e\u0301 a\u0308 n\u0303 combining marks",
    "😀😃😄 🚀 👍🏽 👨‍👩‍👧‍👦 🇩🇪🇫🇷 ❤️‍🔥 ✨", "∀x∈ℝ: x² ≥ 0 ∑∫√∞ ≠ ≈ ≤ ≥ → ⇒",
    "€100 £50 ¥3000 ₹200 ₿0.5", "ﬁ ﬂ ㎏ ① ② Ⅻ ½ ¾ ²³", "\u200b\u200c\u200d\u2060\ufeff zero-width",
    "Ａｂｃ　全角スペース　ＡＢＣ１２３", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕋𝕖𝕩𝕥 𝐁𝐨𝐥𝐝", "𠀀𠀁𪜀 𫝀 \U00031350\U00031351 \U0002EBF0",
]

WS = [" ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", "\r", "\u00a0", "\u3000", "\u2009",
      "\x0b", "\x0c", "\x85", "\u2028", " \n", "\n ", "\t\t", "        "]

SPECIAL_BPE = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<repo_name>", "<filename>",
               "<|im_start|", "<|im_sta", "|im_end|>", "<|im_start|><|im_start|>", "<<|im_end|>>",
               "<|IM_START|>", "< |im_start|>", "<jupyter_code>", "<empty_output>"]
SPECIAL_SPM = ["<s>", "</s>", "<unk>", "<think>", "</think>", "<tool_call>", "[INST]", "[/INST]",
               "<|im_start|>", "<|im_end|>", "<|end|>", "<|eot_id|>", "\u2581<sep>", "user:",
               "<s", "</s", "<thi", "[INST", "<|unused_0|>", "<0x41>", "\u2581"]


def rand_codepoint(rng):
    """A valid Unicode scalar from a mix of ranges, assigned or not."""
    r = rng.random()
    if r < 0.30:
        return chr(rng.randint(0x20, 0x7E))
    if r < 0.40:
        return chr(rng.choice([0x09, 0x0A, 0x0D, 0x20, 0x20, 0x0B, 0x0C, 0x00, 0x1F, 0x7F]))
    if r < 0.55:
        return chr(rng.randint(0xA0, 0x24F))
    if r < 0.80:
        c = rng.randint(0x250, 0xFFFD)
        return chr(c) if not 0xD800 <= c < 0xE000 else "\ufffd"
    if r < 0.90:
        return chr(rng.randint(0x10000, 0x3FFFF))
    return chr(rng.choice([0xE0001, 0xE0041, 0xFE0F, 0xF0000, 0x10FFFD, 0x1F600, 0x1F9D1,
                           0x11F50, 0x1E4D0, 0x2EBF0, 0x13441, 0x180E, 0x1680, 0x202F]))


def gen_prose(rng):
    words = [rng.choice(PROSE) for _ in range(rng.randint(1, 25))]
    s = " ".join(words)
    if rng.random() < 0.3:
        s = s.upper() if rng.random() < 0.5 else s.lower()
    return s


def gen_contractions(rng):
    parts = ["I", "it", "you", "they", "we", "DON", "can", "O", "rock", "'", "''", "x"]
    tails = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL",
             "'D", "'x", "’s", "'", "''s", "'ll've", "'1", " 's", "'é"]
    return "".join(rng.choice(parts) + rng.choice(tails) + rng.choice(["", " ", "!", "\n"])
                   for _ in range(rng.randint(1, 6)))


def gen_numbers(rng):
    out = []
    for _ in range(rng.randint(1, 6)):
        k = rng.random()
        if k < 0.3:
            out.append(str(rng.randint(0, 10 ** rng.randint(1, 15))))
        elif k < 0.5:
            out.append("%.*f" % (rng.randint(1, 6), rng.uniform(-1e4, 1e4)))
        elif k < 0.6:
            out.append("+1 (555) %03d-%04d" % (rng.randint(0, 999), rng.randint(0, 9999)))
        elif k < 0.7:
            out.append("v%d.%d.%d" % (rng.randint(0, 20), rng.randint(0, 99), rng.randint(0, 999)))
        elif k < 0.8:
            out.append("١٢٣ ४५६ ௭௮ ½ ²")
        elif k < 0.9:
            out.append("0x%X" % rng.randint(0, 2 ** 32))
        else:
            out.append("1,234,567.89 12:30:45 2024-01-31")
    return rng.choice([" ", "", ", ", "\n"]).join(out)


def gen_whitespace(rng):
    out = []
    for _ in range(rng.randint(1, 10)):
        out.append("".join(rng.choice(WS) for _ in range(rng.randint(1, 4))))
        if rng.random() < 0.7:
            out.append(rng.choice(["word", "x", "Hello", "123", "!", "é", "你好", "(", "'s", "a1"]))
    return "".join(out)


def gen_code(rng):
    s = rng.choice(CODE)
    if rng.random() < 0.4:
        s = s.replace("    ", "\t")
    if rng.random() < 0.3:
        s = s + rng.choice(CODE)
    return s


def gen_unicode(rng):
    return rng.choice([" ", "", "\n"]).join(rng.choice(UNICODE) for _ in range(rng.randint(1, 3)))


def gen_random_utf8(rng):
    return "".join(rand_codepoint(rng) for _ in range(rng.randint(1, 40)))


def gen_uniform(rng):
    """Code points drawn from all of Unicode (most unassigned), between
    letters, digits and spaces, so category differences show up."""
    out = []
    for _ in range(rng.randint(1, 25)):
        c = rng.randint(0, 0x10FFFF)
        out.append(chr(c) if not 0xD800 <= c < 0xE000 else " ")
        if rng.random() < 0.4:
            out.append(rng.choice([" ", "  ", "\n", "a", "Z", "1", "'s", " \t", "é", "!", "'"]))
    return "".join(out)


def gen_repeat(rng):
    unit = rng.choice(["a", "ab", " ", "=", "-", "\n", "aa ", "ha", "0", "😀", "é", "\t", ".", "*"])
    return unit * rng.randint(1, 80)


def make_special_gen(specials):
    def gen(rng):
        parts = []
        for _ in range(rng.randint(1, 6)):
            k = rng.random()
            if k < 0.45:
                parts.append(rng.choice(specials))
            elif k < 0.75:
                parts.append(rng.choice(["system", "user", "assistant", "\n", " ", "Hello there",
                                         "You are a helpful assistant.", "  x", "\n\n", "é"]))
            else:
                parts.append(gen_prose(rng))
        return "".join(parts)
    return gen


def gen_mixed(rng):
    gens = [gen_prose, gen_numbers, gen_whitespace, gen_unicode, gen_random_utf8, gen_code]
    return "".join(rng.choice(gens)(rng) for _ in range(rng.randint(2, 4)))


FIXED = ["", " ", "  ", "\n", "\t", "a", "'", "'s", "  a", " \n ", "\r\n\r\n", "1234567",
         "Hello world", " Hello world", "Hello  world", "hello\n\nworld", "   leading",
         "trailing   ", "\u00a0\u00a0x", "x\u3000y", "a\x85b", "a\u2028b", "\x00", "\x00\x01\x02",
         "\ufffd", "\U0010FFFD", "\U000E0001", "\u180e", "a\u180eb", "ℌ𝔢𝔩𝔩𝔬", "x" * 300,
         " " * 100 + "end", "\n" * 40, "<|im_start|>system\nYou are a bot<|im_end|>\n",
         # letters, digits and punctuation new in Unicode 15.0/15.1
         "ab\U00031350cd \U0002EBF0\U0002EBF1 x\U0001E4D0y 1\U00011F52 2 \U00011F50\U00011F51",
         "'\U00031350 '\U0001E030 \U0001123Fq",
         "\U00031350's \U0001E4D0'll \U00011F50'd \U0002EBF0!'t", "\U00011B00\U00011B01! ?\U00011F43", "\u1e9e'S \u212a"]


# Invalid UTF-8 (llama.cpp turns each bad byte into U+FFFD; SPM keeps the
# bytes). Surrogates and code points past U+10FFFF are left out: there we
# knowingly differ (see src/text/tok_pretok.c).
BAD_UTF8 = [b"\x80", b"a\xffb", b"\xc3", b"\xc3(", b"\xe2\x82", b"\xe2\x82 x", b"\xf0\x9f\x98",
            b"\xc0\x80", b"\xc1\x81z", b"\xe0\x80\xaf", b"\xfe\xfe\xff", b"ok \xbf\xbf ok",
            b"\xf8\x88\x80\x80\x80", b"<|im_end|>\x80<|im_start|>", b"caf\xe9 na\xefve"]


def make_cases(seed, n, specials):
    rng = random.Random(seed)
    gen_special = make_special_gen(specials)
    gens = [(gen_prose, 10), (gen_contractions, 6), (gen_numbers, 8), (gen_whitespace, 12),
            (gen_code, 10), (gen_unicode, 10), (gen_random_utf8, 14), (gen_repeat, 4),
            (gen_special, 16), (gen_mixed, 10), (gen_uniform, 6)]
    total = sum(w for _, w in gens)
    cases = []
    for s in FIXED + specials + BAD_UTF8:
        cases += [(s, 0), (s, 1)]
    while len(cases) < n:
        r = rng.uniform(0, total)
        for g, w in gens:
            r -= w
            if r <= 0:
                break
        s = g(rng)
        if g is gen_special:  # special-looking text: both ways
            cases += [(s, 0), (s, 1)]
        else:
            cases.append((s, rng.randint(0, 1)))
    # a few long inputs (multi-kilobyte) for speed and long-range merges
    for _ in range(3):
        cases.append(("".join(gen_mixed(rng) for _ in range(40)), rng.randint(0, 1)))
    return cases


# Combining marks next to letters, digits, spaces and punctuation, old and
# Unicode 15.0 ones (qwen35's letter runs take marks, qwen2's do not).
MARK_CASES = ["cafe\u0301 nai\u0308ve", " \u0301x", "\u0301\u0302 a", "1\u0301", "!\u0301?",
              "\u0915\u093f\u0939\u093f\u0928\u094d\u0926\u0940", "\u0ca8\u0cf3 \u0ea5\u0ece",
              "\U00011f04\U00011f34\U00011f00 \U00011f41", "\U0001e4d0\U0001e4ec \U00013441\U00013440",
              "\u0627\U00010efd\U00010eff.", "x\n\u0301\r\n", "'s\u0301 'S", "\U0001e08f\u0430\u0301"]


MARKS = [0x301, 0x308, 0x300, 0x93F, 0x94D, 0x5B4, 0x64E, 0x20D7, 0x1AB0, 0xFE0F, 0x302, 0x327, 0xCF3]
PIECES = ["a", "e", "n", "x", " ", "!", "?", "1", "\u0430", "\u0915", ".", "'", "s", "t", "\n"]


def gen_marks(rng):
    """Short runs of letters, digits, punctuation and apostrophes, half of
    them followed by a combining mark: where qwen35 and qwen2 split apart
    (about 1 in 400 of these changes the ids with this vocabulary)."""
    return "".join(rng.choice(PIECES) + (chr(rng.choice(MARKS)) if rng.random() < 0.5 else "")
                   for _ in range(rng.randint(1, 8)))


# gpt-4o (o200k: gpt-oss, llama4): where its expression differs from the
# others. Case runs (CamelCase, ALLCAPS then lower, non-ASCII cases and
# letters of no case), contractions after either run, digit runs cut in
# threes, punctuation runs that take trailing newlines and slashes, and
# whitespace before them.
GPT4O_CASES = ["HelloWorld", "XMLHttpRequest", "getHTTPResponseCode", "iPhone", "McDonald's", "ÉCOLEécole",
               "ΑθήναΣ", "ПриветМИР", "日本Go語", "ǅungla ǈj", "ABC'S abc'LL Abc'Ve", "I'M i'm O'Neil",
               "12345678901", "1,234,567", "x1y22z333w4444", "٣٤٥٦٧", "१२३४५", "1.5e10", "$1234.50",
               "a/b//c", "foo!!\n\nbar", "x.\r\n\r\ny", "end./\n", " ...\n", "  \n\n  x", "\t\tif(x)",
               "snake_case_name", "kebab-case-name", "__init__", "path/to/file.py", "https://x.io/a?b=c",
               "camelCase123Numbers", "ALL_CAPS_CONST", "e\u0301A\u0301B", "a\u0301b\u0302C\u0303"]
GPT4O_PIECES = ["A", "b", "Zz", "É", "é", "ß", "Σ", "σ", "Д", "д", "日", "1", "22", "333", "'s", "'LL", "'", "/",
                ".", "!", "\n", "\r\n", " ", "  ", "\t", "_", "-", "\u0301", "ǅ", "ﬁ", "٣"]


def gen_gpt4o(rng):
    """Runs of cased and uncased letters, digits, apostrophes, punctuation
    and whitespace in random order: where the case runs split."""
    return "".join(rng.choice(GPT4O_PIECES) for _ in range(rng.randint(1, 12)))


# Each relabelled vocabulary's case seed (fixed: the committed files were
# made with these).
RELABEL_SEEDS = {"default": 10, "gpt2": 11, "llama_bpe": 12, "qwen2": 13, "qwen35": 14, "gpt4o": 15}


def relabel_cases(name, seed, n):
    cases = make_cases(seed, n, SPECIAL_BPE)
    if name == "qwen35":
        rng = random.Random(35)
        cases += [(s, 0) for s in MARK_CASES] + [(gen_marks(rng), rng.randint(0, 1)) for _ in range(3000)]
    if name == "gpt4o":
        rng = random.Random(4)
        cases += [(s, 0) for s in GPT4O_CASES + MARK_CASES] + [(gen_gpt4o(rng), rng.randint(0, 1))
                                                               for _ in range(2000)]
    return cases


SPECIAL_HARMONY = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|call|>", "<|return|>",
                   "<|constrain|>", "<|startoftext|>", "<|endoftext|>", "<|start|>assistant<|channel|>final<|message|>",
                   "<|start|>user<|message|>Hi<|end|>", " to=functions.get_weather<|channel|>commentary json<|message|>",
                   "<|channel|>analysis<|message|>", "<|start", "|end|>", "<|START|>", "<|channel|", "<<|end|>>"]


def write_gptoss_refs(tmp):
    """The tiny gpt-oss fixture's own vocabulary (250 merges, the harmony
    special tokens, pre-tokenizer gpt-4o): special tokens in and around
    text."""
    import testdata_gptoss
    path = os.path.join(tmp, "gpt-oss-f32.gguf")
    testdata_gptoss.write_gptoss(path, expert_type=testdata_gptoss.QT.F32)
    write_refs("gptoss", path, make_cases(40, 800, SPECIAL_HARMONY),
               "the tiny gpt-oss fixture (tools/testdata_gptoss.py, pre gpt-4o)")


def write_refs(name, gguf_path, cases, note):
    import llama_cpp
    m = llama_cpp.Llama(model_path=gguf_path, vocab_only=True, verbose=False)
    path = os.path.join(OUT, name + ".txt")
    with open(path, "w") as f:
        f.write("# reference ids from llama.cpp (llama-cpp-python %s) for %s\n"
                % (llama_cpp.__version__, note))
        f.write("# format: <parse_special> <input hex or -> <ids>; written by tools/tok_refs.py\n")
        for s, special in cases:
            b = s if isinstance(s, bytes) else s.encode("utf-8")
            ids = m.tokenize(b, add_bos=False, special=bool(special))
            f.write("%d %s %s\n" % (special, b.hex() or "-", " ".join(map(str, ids))))
    print("%s: %d cases -> %s (%d bytes)" % (name, len(cases), path, os.path.getsize(path)))


SPECIAL_GEMMA = ["<bos>", "<eos>", "<pad>", "<unk>", "<start_of_turn>", "<end_of_turn>",
                 "<start_of_turn>user\n", "<start_of_turn>model\n", "<start_of_image>",
                 "<end_of_image>", "<mask>", "[multimodal]", "<start_of_turn", "start_of_turn>",
                 "<START_OF_TURN>", "< start_of_turn>", "<unused0>", "<unused99>", "<0x41>",
                 "\u2581", "\t\t\t", "<end_of_turn><start_of_turn>"]


def main_gemma3(model):
    write_refs("gemma3", model, make_cases(30, 2000, SPECIAL_GEMMA), "Gemma 3 270M (SPM, byte fallback)")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--gemma3":
        return main_gemma3(sys.argv[2])
    only = sys.argv[2] if len(sys.argv) == 3 and sys.argv[1] == "--only" else None
    want = lambda name: only is None or name == only  # noqa: E731
    model = os.environ.get("STRATA_MODEL", "")
    if not (model and os.path.exists(model)):
        sys.exit("set STRATA_MODEL to the SmolLM2 GGUF (the relabelled fixtures copy its vocabulary)")
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        testdata_tok.generate(tmp)
        d = os.path.join(tmp, "tok")
        if want("smollm2"):
            write_refs("smollm2", model, make_cases(1, 2400, SPECIAL_BPE), "SmolLM2-135M (pre smollm)")
        for name, (fname, pre) in sorted(testdata_tok.RELABELS.items()):
            n = 700 if name in ("llama_bpe", "qwen2", "qwen35", "gpt4o") else 300
            if want(name):
                write_refs(name, os.path.join(d, fname), relabel_cases(name, RELABEL_SEEDS[name], n),
                           "SmolLM2 vocabulary relabelled pre=" + pre)
        if want("spm"):
            write_refs("spm", os.path.join(d, "spm.gguf"), make_cases(20, 1100, SPECIAL_SPM),
                       "synthetic SPM vocabulary (tools/testdata_tok.py)")
        if want("spm_noprefix"):
            write_refs("spm_noprefix", os.path.join(d, "spm_noprefix.gguf"),
                       make_cases(21, 300, SPECIAL_SPM), "synthetic SPM vocabulary, add_space_prefix=false")
        if want("gpt4o_pairs"):
            write_refs("gpt4o_pairs", os.path.join(d, "gpt4o_pairs.gguf"), relabel_cases("gpt4o", 16, 700),
                       "every-byte-pair vocabulary (tools/testdata_tok.py, write_pairs), pre=gpt-4o")
        if want("gptoss"):
            write_gptoss_refs(tmp)


if __name__ == "__main__":
    main()
