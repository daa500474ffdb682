#!/usr/bin/env python3
"""The independent judge of tests/grammar/test_json_schema.cpp: reads a JSON file
[{"schema": ..., "instances": [text, ...]}, ...] and prints one line per schema, one character per
instance: 1 when the text is JSON valid against the schema (python3-jsonschema, draft 2020-12,
formats checked), 0 otherwise."""
import json, sys
from jsonschema import Draft202012Validator

for case in json.load(open(sys.argv[1], encoding="utf-8")):
    v = Draft202012Validator(case["schema"], format_checker=Draft202012Validator.FORMAT_CHECKER)
    out = []
    for text in case["instances"]:
        try:
            out.append("1" if v.is_valid(json.loads(text)) else "0")
        except (json.JSONDecodeError, RecursionError, UnicodeDecodeError):
            out.append("0")
    print("".join(out) if out else "-")
