"""The schema engine over a corpus of at least 200 schemas (issue 23 item
3), checked independently: the unit tests jsonschema_corpus_tiny and
real_jsonschema_corpus (tests/test_jsonschema_corpus.c) sample
constrained outputs from random logits for every schema in
tests/data/schemas/ (tools/gen_schema_corpus.py: agent tool schemas and
generated ones) and tests/data/clients/ (captured client tool schemas,
when present), and write them out; here every finished output is
validated with the `jsonschema` package (Draft 2020-12, formats checked).
To add schemas: drop a JSON file (one schema, a list of schemas or tools,
or {"schemas": [...]}) into either folder."""
import json
import os
import re
import subprocess

import pytest
from jsonschema import Draft202012Validator

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TESTS = os.path.join(ROOT, "build", "strata-tests")
GEN = os.environ.get("TEST_DATA_DIR", os.path.join(ROOT, "tests", "data", "gen"))
REAL_MODEL = os.environ.get("STRATA_MODEL", os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
# The package checks "uri" only with rfc3987 installed: this is the shape
# the engine writes (RFC 3986: a scheme, then URI characters).
URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:([A-Za-z0-9._~:/?#@!$&'()*+,;=\[\]-]|%[0-9A-Fa-f]{2})*$")


def item_schema(it):
    fn = it.get("function") if isinstance(it, dict) else None
    if isinstance(fn, dict) and "parameters" in fn:
        return fn["parameters"]
    if "input_schema" in it:
        return it["input_schema"]
    if isinstance(it.get("parameters"), dict) and "type" not in it:
        return it["parameters"]
    return it


def file_items(doc):
    if isinstance(doc, list):
        return doc
    if isinstance(doc.get("schemas"), list):
        return doc["schemas"]
    return [doc]


def uri_errors(schema, value, path=()):
    """Strings under format uri that do not have the shape (walks the
    value beside the schema's properties/items only: enough for the corpus)."""
    if not isinstance(schema, dict):
        return []
    out = []
    if schema.get("format") == "uri" and isinstance(value, str) and not URI.match(value):
        out.append(f"{'/'.join(map(str, path))}: {value!r} is not a uri")
    if isinstance(value, dict):
        for k, v in value.items():
            out += uri_errors(schema.get("properties", {}).get(k), v, path + (k,))
    if isinstance(value, list):
        for i, v in enumerate(value):
            out += uri_errors(schema.get("items"), v, path + (i,))
    return out


def sample(tmp_path, test, env_extra=None):
    if not os.path.exists(TESTS):
        subprocess.run(["make", "-s", "build/strata-tests"], cwd=ROOT, check=True)
    out = tmp_path / f"{test}.jsonl"
    env = dict(os.environ, STRATA_SCHEMA_SAMPLES=str(out), TEST_DATA_DIR=GEN, **(env_extra or {}))
    r = subprocess.run([TESTS, test], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and f"ok   {test}" in r.stdout, r.stdout + r.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


def validate_all(lines):
    docs, errors, checked, schemas = {}, [], 0, set()
    for e in lines:
        if e["file"] not in docs:
            with open(os.path.join(ROOT, e["file"])) as f:
                docs[e["file"]] = file_items(json.load(f))
        schemas.add((e["file"], e["index"]))
        if not e["closed"]:
            continue
        if e["unenforced"]:  # a captured client schema the engine enforces only in part
            continue
        schema = item_schema(docs[e["file"]][e["index"]])
        value = json.loads(e["output"])
        v = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
        errs = [f"{'/'.join(map(str, x.absolute_path))}: {x.message}" for x in v.iter_errors(value)] + uri_errors(schema, value)
        if errs:
            errors.append(f"{e['file']}[{e['index']}] seed {e['seed']}: {errs[0]}\n    output: {e['output'][:300]!r}")
        checked += 1
    return errors, checked, schemas


def test_corpus_schemas_are_valid_schemas():
    with open(os.path.join(ROOT, "tests", "data", "schemas", "corpus.json")) as f:
        items = file_items(json.load(f))
    assert len(items) >= 200
    for it in items:
        Draft202012Validator.check_schema(item_schema(it))


@pytest.mark.parametrize("test", ["jsonschema_corpus_tiny", "real_jsonschema_corpus"])
def test_sampled_outputs_validate(tmp_path, test):
    if test.startswith("real") and not os.path.exists(REAL_MODEL):
        pytest.skip("no STRATA_MODEL")  # the tiny run above covers the corpus without it
    lines = sample(tmp_path, test, {"STRATA_MODEL": REAL_MODEL} if test.startswith("real") else None)
    errors, checked, schemas = validate_all(lines)
    assert len(schemas) >= 200, f"only {len(schemas)} schemas sampled"
    assert checked >= 200, f"only {checked} finished outputs"
    assert not errors, f"{len(errors)} of {checked} outputs do not validate:\n" + "\n".join(errors[:10])
