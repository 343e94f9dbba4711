"""Template mutator: real chat templates (tests/data/tmpl/*.jinja) with
Jinja-aware and byte-level mutations, and mutated render contexts from
tests/data/tmpl/convs.jsonl, parsed and rendered by the fuzz_tmpl driver
(tests/fuzz/fuzz_tmpl.c with a plain main). Each case must end in output
or an error: a signal, a sanitizer report or a timeout is a finding."""
import glob
import json
import os
import tempfile

import harness

CASE_TIMEOUT_S = 20

# Pieces of Jinja the mutations splice in: tags, filters, tests, methods,
# deep or endless constructs the engine's limits must stop.
JINJA_PIECES = [
    "{%", "%}", "{{", "}}", "{#", "#}", "{%-", "-%}", "{{-", "-}}", "{% endif %}", "{% endfor %}",
    "{% else %}", "{% elif x %}", "{% for m in messages %}", "{% if messages %}", "{% set x = 1 %}",
    "{% macro f(a) %}{{ a }}{% endmacro %}", "{{ f(1) }}", "{% set ns = namespace(a=1) %}",
    "{{ ns.a }}", "{% break %}", "{% continue %}", "loop.index", "loop.last", "loop.cycle(1,2)",
    "|tojson", "|tojson(indent=2)", "|length", "|trim", "|upper", "|join(',')", "|list", "|first",
    "|last", "|map(attribute='role')", "|selectattr('role','equalto','user')", "|reverse",
    "|items", "|default('x')", "|string", "|int", "|float", "|round(2)", "|replace('a','b')",
    "|format(1)", "|indent(4)", "|safe", "|sort", "|unique", "|abs", "|batch(2)",
    ".split(' ')", ".strip()", ".startswith('a')", ".endswith(x)", ".items()", ".keys()",
    ".get('a')", ".upper()", "[0]", "[-1]", "[::-1]", "[1:]", "[:-1]", "messages", "tools",
    "raise_exception('no')", "strftime_now('%Y')", "range(1000000000)", "range(-5)",
    "'%09999d' % 1", "'a' * 100000000", "((((((((((1))))))))))", "x is defined", "x is none",
    "x is string", "x is mapping", "x in y", "not x", "x ~ y", "x // 0", "x % 0", "1 / 0",
    "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
    "{% macro r(n) %}{{ r(n) }}{% endmacro %}{{ r(1) }}", "\"\\u0000\"", "'\\x00'", "\x00", "\xff",
    "{% filter upper %}a{% endfilter %}", "{% call f(1) %}x{% endcall %}", "{% raw %}{{{% endraw %}",
]


def load_templates():
    paths = sorted(glob.glob(os.path.join(harness.ROOT, "tests", "data", "tmpl", "*.jinja")))
    return [open(p, "rb").read() for p in paths]


def load_contexts():
    ctxs = []
    with open(os.path.join(harness.ROOT, "tests", "data", "tmpl", "convs.jsonl")) as f:
        for line in f:
            if line.strip():
                ctxs.append(json.loads(line))
    return ctxs


def mutate_value(rng, v, depth=0):
    """A JSON value changed somewhere: type swaps, odd strings, nesting."""
    odd = [None, True, 0, -1, 1e308, "", "\u0000", "\ud7ff\ue000", "x" * 5000, [], {}, [[[[[]]]]],
           {"role": "user", "content": None}, {"content": ["a", {"b": 1}]}]
    if depth > 6 or rng.random() < 0.2:
        return rng.choice(odd)
    if isinstance(v, dict) and v:
        k = rng.choice(sorted(v))
        out = dict(v)
        if rng.random() < 0.2:
            del out[k]
        else:
            out[k] = mutate_value(rng, v[k], depth + 1)
        return out
    if isinstance(v, list) and v:
        out = list(v)
        i = rng.randrange(len(out))
        op = rng.randrange(3)
        if op == 0:
            out[i] = mutate_value(rng, out[i], depth + 1)
        elif op == 1:
            out.insert(i, out[i])
        else:
            del out[i]
        return out
    return rng.choice(odd)


def mutate_template(rng, templates):
    src = rng.choice(templates)
    op = rng.randrange(5)
    if op == 0:
        return harness.mutate_bytes(rng, src)
    if op == 1:  # splice a piece of Jinja somewhere
        pos = rng.randrange(len(src) + 1)
        return src[:pos] + rng.choice(JINJA_PIECES).encode("utf-8", "surrogateescape") + src[pos:]
    if op == 2:  # drop a span
        a = rng.randrange(len(src) + 1)
        return src[:a] + src[a + rng.randint(1, 200):]
    if op == 3:  # cross two templates
        other = rng.choice(templates)
        return src[:rng.randrange(len(src) + 1)] + other[rng.randrange(len(other) + 1):]
    lines = src.split(b"\n")  # shuffle a few lines
    for _ in range(rng.randint(1, 3)):
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    return b"\n".join(lines)


def make_case(rng, templates, contexts):
    tmpl = mutate_template(rng, templates)
    ctx = dict(rng.choice(contexts))
    ctx.setdefault("add_generation_prompt", True)
    ctx.setdefault("bos_token", "<s>")
    ctx.setdefault("eos_token", "</s>")
    if rng.random() < 0.5:
        ctx = mutate_value(rng, ctx)
    if not isinstance(ctx, dict):
        ctx = {"messages": ctx}
    return tmpl + b"\0" + json.dumps(ctx).encode()


def run(bin_dir, seed, count, seconds, out_dir):
    tally = harness.Tally("template", out_dir)
    rng = harness.seeded(seed, "template")
    driver = os.path.join(bin_dir, "fuzz-tmpl")
    templates, contexts = load_templates(), load_contexts()
    with tempfile.TemporaryDirectory(prefix="strata-fuzz-tmpl-") as tmp:
        path = os.path.join(tmp, "case.bin")
        for _ in harness.Budget(count, seconds).cases():
            case = make_case(rng, templates, contexts)
            with open(path, "wb") as f:
                f.write(case)
            index = tally.case()
            rc, _, err, hung = harness.run_cmd([driver, path], CASE_TIMEOUT_S)
            bad = harness.classify_exit(rc, err, hung)
            if bad:
                tally.fail(bad[0], index, bad[1], case)
    return tally
