#!/usr/bin/env python3
"""Writes tests/data/schemas/corpus.json: JSON Schemas for the corpus test
of the schema engine (tests/e2e/test_schema_corpus.py samples constrained
outputs for each and validates them with the `jsonschema` package).

Two parts: hand-written agent tool schemas in the shapes real clients send
(file read/write/edit, bash, grep, glob, todo lists, web fetch and search,
agents and messages with allOf [{}, {}], patterns such as ^[a-z0-9-]+$,
date-time fields, recursive trees, discriminated unions, pydantic-style
$defs with nullable fields), then generated ones that combine every
enforced keyword (lengths, pattern, format, bounds, enum/const, arrays with
min/maxItems, nested objects, allOf splits, $ref, recursion, oneOf/anyOf,
propertyNames, integer multipleOf). Deterministic (seeded): rerun after changing it and commit
the output. Only keywords the engine enforces appear, so every sampled
output must validate. Usage: tools/gen_schema_corpus.py [OUT [SEED [COUNT]]]
(another seed and count give a fresh corpus for a longer soak: point
STRATA_SCHEMA_DIRS at its folder)."""
import json
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "data", "schemas", "corpus.json")


def obj(props, required=(), addl=False, **kw):
    s = {"type": "object", "properties": props, "required": list(required)}
    if addl is not None:
        s["additionalProperties"] = addl
    s.update(kw)
    return s


S = {"type": "string"}
PATH = {"type": "string", "minLength": 1, "maxLength": 200, "description": "Absolute path"}

HAND = [
    # Claude-Code-like tools
    obj({"file_path": PATH, "offset": {"type": "integer", "minimum": 0}, "limit": {"type": "integer", "exclusiveMinimum": 0, "maximum": 2000}}, ["file_path"]),
    obj({"file_path": PATH, "content": {"type": "string", "maxLength": 400}}, ["file_path", "content"]),
    obj({"file_path": PATH, "old_string": {"type": "string", "minLength": 1, "maxLength": 80},
         "new_string": {"type": "string", "maxLength": 80}, "replace_all": {"type": "boolean", "default": False}},
        ["file_path", "old_string", "new_string"]),
    obj({"command": {"type": "string", "minLength": 1, "maxLength": 300}, "timeout": {"type": "number", "minimum": 1, "maximum": 600000},
         "description": {"type": "string", "maxLength": 60}, "run_in_background": {"type": "boolean"}}, ["command"]),
    obj({"pattern": {"type": "string", "minLength": 1, "maxLength": 60}, "path": {"type": "string"},
         "glob": {"type": "string", "pattern": "^[^\\s]+$", "maxLength": 30},
         "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"]},
         "-i": {"type": "boolean"}, "-n": {"type": "boolean"}, "head_limit": {"type": "integer", "minimum": 1, "maximum": 500}},
        ["pattern"]),
    obj({"pattern": {"type": "string", "minLength": 1}, "path": {"type": "string"}}, ["pattern"]),
    obj({"todos": {"type": "array", "maxItems": 5, "items": obj(
        {"content": {"type": "string", "minLength": 1, "maxLength": 60},
         "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
         "activeForm": {"type": "string", "minLength": 1, "maxLength": 60},
         "id": {"type": "string", "pattern": "^[a-z0-9-]+$", "maxLength": 12}},
        ["content", "status", "id"])}}, ["todos"]),
    obj({"url": {"type": "string", "format": "uri", "maxLength": 120}, "prompt": {"type": "string", "maxLength": 100}}, ["url", "prompt"]),
    obj({"query": {"type": "string", "minLength": 2, "maxLength": 80},
         "allowed_domains": {"type": "array", "items": {"type": "string", "pattern": "^[a-z0-9.-]+$", "maxLength": 30}, "maxItems": 3},
         "blocked_domains": {"type": "array", "items": {"type": "string"}, "maxItems": 2}}, ["query"]),
    obj({"to": {"type": "string", "allOf": [{}, {}]}, "message": {"type": "string", "maxLength": 200},
         "summary": {"type": "string", "maxLength": 50}}, ["to", "message"]),
    obj({"filter": {"type": "string", "pattern": "^[a-zA-Z0-9_-]*$", "maxLength": 20},
         "limit": {"type": "integer", "minimum": 1, "maximum": 50}}, []),
    obj({"findings": {"type": "array", "minItems": 1, "maxItems": 3, "items": obj(
        {"title": {"type": "string", "minLength": 3, "maxLength": 40},
         "severity": {"enum": ["low", "medium", "high", "critical"]},
         "file": {"type": "string", "maxLength": 60}, "line": {"type": "integer", "minimum": 1}},
        ["title", "severity"])}, "summary": {"type": "string", "maxLength": 120}}, ["findings"]),
    obj({"name": {"type": "string", "pattern": "^[a-z][a-z0-9_]{2,20}$"},
         "steps": {"type": "array", "minItems": 1, "maxItems": 4, "items": {"$ref": "#/$defs/step"}}},
        ["name", "steps"], **{"$defs": {"step": obj({"run": {"type": "string", "maxLength": 40},
                                                       "needs": {"type": "array", "items": {"type": "string", "pattern": "^[a-z][a-z0-9_]*$", "maxLength": 10}, "maxItems": 2}},
                                                      ["run"])}}),
    obj({"subagent_type": {"type": "string", "enum": ["general-purpose", "explorer", "planner"]},
         "description": {"type": "string", "minLength": 3, "maxLength": 40}, "prompt": {"type": "string", "maxLength": 200}},
        ["subagent_type", "description", "prompt"]),
    obj({"notebook_path": PATH, "cell_id": {"type": "string", "pattern": "^[0-9a-f]{8}$"},
         "new_source": {"type": "string", "maxLength": 100}, "cell_type": {"enum": ["code", "markdown"]},
         "edit_mode": {"enum": ["replace", "insert", "delete"]}}, ["notebook_path", "new_source"]),
    # calendars, users, network
    obj({"title": {"type": "string", "maxLength": 50}, "start": {"type": "string", "format": "date-time"},
         "end": {"type": "string", "format": "date-time"}, "day": {"type": "string", "format": "date"},
         "attendees": {"type": "array", "items": {"type": "string", "format": "email", "maxLength": 40}, "maxItems": 3}},
        ["title", "start"]),
    obj({"id": {"type": "string", "format": "uuid"}, "email": {"type": "string", "format": "email", "maxLength": 50},
         "age": {"type": "integer", "minimum": 13, "maximum": 120}, "created_at": {"type": "string", "format": "date-time"}},
        ["id", "email"]),
    obj({"host": {"type": "string", "format": "ipv4"}, "host6": {"type": "string", "format": "ipv6"},
         "port": {"type": "integer", "minimum": 1, "maximum": 65535}, "at": {"type": "string", "format": "time"}}, ["host", "port"]),
    # recursive trees
    {"$ref": "#/$defs/dir", "$defs": {"dir": obj({"name": {"type": "string", "pattern": "^[A-Za-z0-9._-]+$", "maxLength": 20},
                                                   "children": {"type": "array", "maxItems": 3, "items": {"$ref": "#/$defs/dir"}}},
                                                  ["name"])}},
    obj({"expr": {"$ref": "#/definitions/expr"}}, ["expr"], definitions={"expr": {"anyOf": [
        {"type": "integer", "minimum": -100, "maximum": 100},
        obj({"op": {"enum": ["+", "-", "*"]}, "args": {"type": "array", "minItems": 2, "maxItems": 2, "items": {"$ref": "#/definitions/expr"}}}, ["op", "args"])]}}),
    # pydantic Optional[Self]: recursion through anyOf [$ref, null]
    {"$defs": {"Node": {"type": "object", "properties": {"value": {"type": "integer", "minimum": 0, "maximum": 99},
                                                         "next": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}], "default": None}},
                        "required": ["value", "next"], "additionalProperties": False}},
     "type": "object", "properties": {"head": {"$ref": "#/$defs/Node"}}, "required": ["head"]},
    {"$defs": {"Comment": {"type": "object", "properties": {"text": {"type": "string", "maxLength": 30},
                                                            "replies": {"anyOf": [{"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/Comment"}}, {"type": "null"}]}},
                           "required": ["text"]}},
     "$ref": "#/$defs/Comment"},
    # discriminated unions (JSON patch ops)
    obj({"ops": {"type": "array", "maxItems": 3, "items": {"oneOf": [
        obj({"op": {"const": "add"}, "path": {"type": "string", "pattern": "^(/[a-z0-9]+)+$", "maxLength": 20}, "value": {}}, ["op", "path", "value"]),
        obj({"op": {"const": "remove"}, "path": {"type": "string", "pattern": "^(/[a-z0-9]+)+$", "maxLength": 20}}, ["op", "path"]),
        obj({"op": {"enum": ["move", "copy"]}, "from": {"type": "string", "maxLength": 20}, "path": {"type": "string", "maxLength": 20}}, ["op", "from", "path"])]}}}, ["ops"]),
    # pydantic style
    {"$defs": {"Pet": {"properties": {"kind": {"enum": ["dog", "cat"], "title": "Kind", "type": "string"},
                                      "name": {"title": "Name", "type": "string", "maxLength": 20}},
                       "required": ["kind", "name"], "title": "Pet", "type": "object", "additionalProperties": False}},
     "properties": {"name": {"title": "Name", "type": "string", "maxLength": 30}, "age": {"title": "Age", "type": "integer"},
                    "pets": {"items": {"$ref": "#/$defs/Pet"}, "title": "Pets", "type": "array", "maxItems": 2},
                    "nickname": {"anyOf": [{"type": "string", "maxLength": 10}, {"type": "null"}], "default": None, "title": "Nickname"}},
     "required": ["name", "age", "pets", "nickname"], "title": "Owner", "type": "object", "additionalProperties": False},
    # labels, semver, maps
    obj({"labels": {"type": "object", "propertyNames": {"pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 15},
                    "additionalProperties": {"type": "string", "maxLength": 20}, "maxProperties": 3},
         "version": {"type": "string", "pattern": "^(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$", "maxLength": 20}},
        ["version"]),
    obj({"env": {"type": "object", "propertyNames": {"enum": ["PATH", "HOME", "LANG"]}, "additionalProperties": {"type": "string", "maxLength": 20}},
         "mode": {"const": "strict"}, "flags": {"const": ["-x", "-v"]}, "meta": {"enum": [{"a": 1}, {"b": [True, None]}]}}, ["mode"]),
    # either/or arguments
    {"type": "object", "properties": {"path": PATH, "url": {"type": "string", "format": "uri", "maxLength": 80},
                                      "encoding": {"enum": ["utf-8", "base64"]}},
     "oneOf": [{"required": ["path"]}, {"required": ["url"]}], "additionalProperties": False},
    {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1}, "name": {"type": "string", "maxLength": 20}},
     "anyOf": [{"required": ["id"]}, {"required": ["name"]}]},
    {"allOf": [obj({"a": {"type": "integer", "minimum": 0}}, ["a"], addl=None),
               obj({"a": {"maximum": 10}, "b": {"type": "string", "format": "date"}}, ["b"], addl=None)]},
]

PATTERNS = ["^[a-z0-9-]+$", "^[A-Z]{2,3}-[0-9]{1,4}$", "^[a-z_][a-z0-9_]*$", "^\\+?[0-9]{6,12}$", "^#[0-9a-fA-F]{6}$",
            "^(feat|fix|docs|chore): .+$", "^v[0-9]+(\\.[0-9]+){0,2}$", "^[^\\s@]+@[^\\s@]+$", "ab?c", "^\\w+$",
            "^(?:[A-Za-z0-9+/]{4})*$", "^[a-z]+(-[a-z]+)*$", "\\.py$", "^/[^\\s]*$", "^(GET|POST|PUT|DELETE)$"]
FORMATS = ["date-time", "date", "time", "email", "uuid", "ipv4", "ipv6", "uri"]
WORDS = ["path", "name", "query", "limit", "mode", "items", "id", "title", "when", "tags", "count", "note", "url", "owner",
         "status", "level", "ratio", "flag", "kind", "value", "target", "source", "size", "color", "lang", "code"]


def gen_string(r):
    s = {"type": "string"}
    k = r.random()
    if k < 0.3:
        s["pattern"] = r.choice(PATTERNS)
        s["maxLength"] = r.randint(8, 40)
    elif k < 0.5:
        s["format"] = r.choice(FORMATS)
        if s["format"] in ("email", "uri"):
            s["maxLength"] = r.randint(20, 60)
    else:
        if r.random() < 0.7:
            s["maxLength"] = r.randint(1, 50)
        if r.random() < 0.5:
            s["minLength"] = r.randint(0, min(5, s.get("maxLength", 5)))
    return s


def gen_number(r):
    if r.random() < 0.5:
        lo = r.randint(-50, 50)
        s = {"type": "integer", "minimum": lo, "maximum": lo + r.randint(0, 1000)}
        if r.random() < 0.3:
            s["exclusiveMaximum"] = s.pop("maximum") + 1
        hi = s.get("maximum", s.get("exclusiveMaximum", 0) - 1)
        if r.random() < 0.25 and hi - lo >= 25:  # wide enough to hold a multiple
            s["multipleOf"] = r.choice([2, 5, 10, 25])
        return s
    s = {"type": "number"}
    if r.random() < 0.6:
        s["minimum"] = r.choice([0, -1, 0.5, -100])
        s["maximum"] = s["minimum"] + r.choice([1, 10, 1000])
    return s


def gen_leaf(r):
    k = r.random()
    if k < 0.4:
        return gen_string(r)
    if k < 0.6:
        return gen_number(r)
    if k < 0.7:
        return {"type": "boolean"}
    if k < 0.8:
        return {"enum": r.sample(["a", "b", "c", "north", "south", 1, 2, None, True], r.randint(1, 4))}
    if k < 0.85:
        return {"const": r.choice(["fixed", 42, False])}
    if k < 0.95:
        return {"anyOf": [gen_leaf(r), {"type": "null"}]}
    return {"type": ["string", "null"], "maxLength": r.randint(1, 20)}


def gen_value(r, depth):
    k = r.random()
    if depth < 3 and k < 0.15:
        return gen_object(r, depth + 1)
    if depth < 3 and k < 0.3:
        lo = r.randint(0, 2)
        return {"type": "array", "items": gen_value(r, depth + 1) if r.random() < 0.7 else gen_leaf(r), "minItems": lo,
                "maxItems": lo + r.randint(0, 3)}
    return gen_leaf(r)


def gen_object(r, depth=0):
    names = r.sample(WORDS, r.randint(1, 6))
    props = {n: gen_value(r, depth) for n in names}
    req = [n for n in names if r.random() < 0.5]
    return obj(props, req, addl=r.choice([False, False, None]))


def with_allof(r, s):
    """The same constraints split across allOf branches."""
    props = list(s["properties"].items())
    cut = r.randint(0, len(props))
    a = {"type": "object", "properties": dict(props[:cut])}
    b = {"properties": dict(props[cut:]), "required": s["required"]}
    return {"allOf": [a, b, {}]}


def with_defs(r, s):
    """Each object-valued property moved to $defs and referenced."""
    defs = {}
    for n, v in list(s["properties"].items()):
        if v.get("type") == "object":
            defs[n.capitalize()] = v
            s["properties"][n] = {"$ref": f"#/$defs/{n.capitalize()}"}
    if defs:
        s["$defs"] = defs
    return s


def gen_union(r):
    kinds = r.sample(["click", "type", "scroll", "wait", "done"], r.randint(2, 4))
    branches = []
    for k in kinds:
        b = gen_object(r, 2)
        b["properties"] = {"action": {"const": k}, **b["properties"]}
        b["required"] = ["action"] + b["required"]
        b["additionalProperties"] = False
        branches.append(b)
    return obj({"step": {r.choice(["oneOf", "anyOf"]): branches}}, ["step"])


def gen_tree(r):
    leaf = gen_leaf(r)
    return {"type": "object", "$defs": {"node": obj({"value": leaf, "children": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/node"}}}, ["value"])},
            "properties": {"root": {"$ref": "#/$defs/node"}}, "required": ["root"], "additionalProperties": False}


def gen_exotic(r):
    """Keyword combinations that go through the merging and union code."""
    k = r.randrange(7)
    a, b, c = gen_object(r, 2), gen_object(r, 2), gen_object(r, 2)
    if k == 0:  # allOf with an anyOf inside: distributed into the branches (c's names apart, so satisfiable)
        extra = {n + "_x": v for n, v in c["properties"].items()}
        for br in (a, b):
            br["additionalProperties"] = None
            del br["additionalProperties"]
        return {"allOf": [{"anyOf": [a, b]}, {"type": "object", "properties": extra}]}
    if k == 1:  # a $ref with keywords beside it
        return {"type": "object", "properties": {"x": {"$ref": "#/$defs/A", "required": list(a["properties"])[:1]}},
                "required": ["x"], "$defs": {"A": a}}
    if k == 2:  # scalar anyOf (overlapping or not), oneOf of disjoint ones
        if r.random() < 0.5:
            return obj({"v": {"anyOf": [gen_leaf(r), gen_leaf(r), {"type": "string", "maxLength": 3}]}}, ["v"])
        return obj({"v": {"oneOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"type": "integer", "minimum": 10},
                                    {"enum": ["a", "b"]}, {"enum": ["c", True]}, {"type": "string", "pattern": "^x"}]}}, ["v"])
    if k == 3:  # several string keywords at once, some through allOf
        return obj({"s": {"type": "string", "allOf": [{"pattern": r.choice(PATTERNS)}, {"maxLength": r.randint(10, 30)}],
                          "minLength": r.randint(0, 3)}}, [])
    if k == 4:  # enums and consts of any values
        return obj({"e": {"enum": [{"k": 1}, [1, "x"], "s", 3.5, None]}, "c": {"const": {"deep": [{"a": None}]}}}, ["c"])
    if k == 5:  # maps with key rules
        return obj({"m": {"type": "object", "propertyNames": r.choice([{"pattern": "^[a-z]{1,8}$"}, {"enum": ["x", "y", "z"]},
                                                                       {"maxLength": 4, "minLength": 1}]),
                          "additionalProperties": gen_leaf(r), "maxProperties": 3}}, ["m"])
    return {"type": "object", "properties": {"p": {"type": "integer"}},  # oneOf of required sets over shared properties
            "oneOf": [{"required": ["p"]}, {"properties": {"q": {"type": "string", "maxLength": 5}}, "required": ["q"]}]}


def main():
    r = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 23)
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 230
    out = list(HAND)
    while len(out) < count:
        k = r.random()
        if k < 0.55:
            out.append(gen_object(r))
        elif k < 0.7:
            out.append(with_allof(r, gen_object(r)))
        elif k < 0.8:
            out.append(with_defs(r, gen_object(r)))
        elif k < 0.85:
            out.append(gen_union(r))
        elif k < 0.9:
            out.append(gen_tree(r))
        else:
            out.append(gen_exotic(r))
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"about": "generated by tools/gen_schema_corpus.py; do not edit", "schemas": out}, f, indent=None)
        f.write("\n")
    print(f"{len(out)} schemas -> {OUT}")


if __name__ == "__main__":
    main()
