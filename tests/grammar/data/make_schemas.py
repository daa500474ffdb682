#!/usr/bin/env python3
"""Writes schemas.json: real-world-shaped JSON Schemas, each with valid and invalid instance texts,
for tests/grammar/test_json_schema.cpp. Valid instances are written in the converter's form
(properties in schema order; compact, spaced and indented styles); every one is checked here
with python3-jsonschema (the test checks again). Run: python3 make_schemas.py > schemas.json"""
import json, sys
from jsonschema import Draft202012Validator, FormatChecker

S = []
def add(name, schema, valid, invalid=()):
    S.append({"name": name, "schema": schema, "valid": list(valid), "invalid": list(invalid)})

def styles(obj):
    return [json.dumps(obj, separators=(",", ":"), ensure_ascii=False),
            json.dumps(obj, ensure_ascii=False),
            json.dumps(obj, indent=2, ensure_ascii=False)]

STR, INT, NUM, BOOL = {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}
def obj(props, required=None, extra=False):
    s = {"type": "object", "properties": props, "required": list(props) if required is None else required}
    if extra is not None: s["additionalProperties"] = extra
    return s

add("person", obj({"name": STR, "age": INT, "email": STR}), styles({"name": "Ada", "age": 36, "email": "ada@x.org"}),
    ['{"name":"Ada","age":"36","email":"a"}', '{"name":"Ada","email":"a"}', '{"name":"Ada","age":3.5,"email":"a"}'])
add("weather", obj({"location": STR, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer", "minimum": 1, "maximum": 14}}),
    styles({"location": "Paris, FR", "unit": "celsius", "days": 7}), ['{"location":"P","unit":"kelvin","days":7}', '{"location":"P","unit":"celsius","days":15}', '{"location":"P","unit":"celsius","days":0}'])
add("tool_call", obj({"name": {"type": "string", "enum": ["search", "calculator", "weather"]}, "arguments": obj({"query": STR})}),
    styles({"name": "search", "arguments": {"query": "llm inference"}}), ['{"name":"browse","arguments":{"query":"x"}}'])
add("address", obj({"street": STR, "city": STR, "zip": {"type": "string", "pattern": "^[0-9]{5}(-[0-9]{4})?$"}, "country": {"type": "string", "enum": ["US", "CA"]}}),
    styles({"street": "1 Main St", "city": "Springfield", "zip": "12345-6789", "country": "US"}), ['{"street":"a","city":"b","zip":"1234","country":"US"}'])
add("order", obj({"order_id": {"type": "string", "format": "uuid"}, "items": {"type": "array", "items": obj({"sku": STR, "qty": {"type": "integer", "minimum": 1}, "price": {"type": "number", "minimum": 0}}), "minItems": 1}, "total": {"type": "number", "minimum": 0}}),
    styles({"order_id": "123e4567-e89b-12d3-a456-426614174000", "items": [{"sku": "A-1", "qty": 2, "price": 9.99}], "total": 19.98}),
    ['{"order_id":"123e4567-e89b-12d3-a456-42661417400","items":[],"total":1}', '{"order_id":"123e4567-e89b-12d3-a456-426614174000","items":[],"total":1}'])
add("event", obj({"title": STR, "date": {"type": "string", "format": "date"}, "start": {"type": "string", "format": "time"}, "created": {"type": "string", "format": "date-time"}}),
    styles({"title": "Standup", "date": "2024-02-28", "start": "09:30:00Z", "created": "2024-01-01T08:00:00.5+01:00"}), ['{"title":"x","date":"2024-13-01","start":"09:30:00Z","created":"2024-01-01T08:00:00Z"}', '{"title":"x","date":"2024-02-30","start":"09:30:00Z","created":"2024-01-01T08:00:00Z"}'])
add("sentiment", obj({"label": {"enum": ["positive", "negative", "neutral"]}, "confidence": {"type": "number", "minimum": 0, "maximum": 1}}),
    styles({"label": "neutral", "confidence": 0.75}) + ['{"label":"positive","confidence":1}', '{"label":"positive","confidence":1.000}'],
    ['{"label":"positive","confidence":1.5}', '{"label":"positive","confidence":-0.1}', '{"label":"happy","confidence":0.5}'])
add("optional_fields", obj({"id": INT, "nickname": STR, "bio": STR, "verified": BOOL}, required=["id"]),
    styles({"id": 1}) + styles({"id": 2, "bio": "hi"}) + styles({"id": 3, "nickname": "n", "verified": False}), ['{"bio":"hi"}', '{"id":1,"verified":"no"}'])
add("all_optional", obj({"a": INT, "b": STR, "c": BOOL}, required=[]), ["{}", '{"b":"x"}', '{"a":1,"c":true}', '{ "c": false }'], ['{"a":"1"}'])
add("tree", {"$defs": {"node": obj({"value": INT, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}})}, "$ref": "#/$defs/node"},
    styles({"value": 1, "children": [{"value": 2, "children": []}, {"value": 3, "children": [{"value": 4, "children": []}]}]}), ['{"value":1,"children":[{"value":2}]}'])
add("linked_list", {"$defs": {"item": obj({"v": STR, "next": {"anyOf": [{"$ref": "#/$defs/item"}, {"type": "null"}]}})}, "$ref": "#/$defs/item"},
    styles({"v": "a", "next": {"v": "b", "next": None}}), ['{"v":"a","next":{"v":1,"next":null}}'])
add("self_ref", {"type": "object", "properties": {"name": STR, "sub": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}, "required": ["name", "sub"], "additionalProperties": False},
    styles({"name": "root", "sub": {"name": "leaf", "sub": None}}))
add("tags", obj({"tags": {"type": "array", "items": STR, "minItems": 1, "maxItems": 3}}),
    styles({"tags": ["a"]}) + styles({"tags": ["a", "b", "c"]}), ['{"tags":[]}', '{"tags":["a","b","c","d"]}', '{"tags":[1]}'])
add("matrix", obj({"rows": {"type": "array", "items": {"type": "array", "items": NUM, "minItems": 2, "maxItems": 2}}}),
    styles({"rows": [[1, 2], [3.5, -4e2]]}), ['{"rows":[[1]]}'])
add("nullable", obj({"middle_name": {"type": ["string", "null"]}, "age": {"type": ["integer", "null"]}}),
    styles({"middle_name": None, "age": 5}) + styles({"middle_name": "Q", "age": None}), ['{"middle_name":1,"age":null}'])
add("const_version", obj({"version": {"const": "1.0"}, "kind": {"const": 3}}), styles({"version": "1.0", "kind": 3}), ['{"version":"1.1","kind":3}'])
add("status_enum", {"type": "string", "enum": ["draft", "published", "archived"]}, ['"draft"', '"archived"'], ['"deleted"', 'draft'])
add("mixed_enum", {"enum": ["a", 1, None, True, {"k": [1]}]}, ['"a"', "1", "null", "true", '{"k":[1]}'], ["false", '"b"'])
add("integer_range", {"type": "integer", "minimum": -50, "maximum": 1234}, ["-50", "0", "7", "1234", "999"], ["-51", "1235", "1.5", "01"])
add("negative_range", {"type": "integer", "minimum": -1000, "maximum": -10}, ["-10", "-999", "-1000", "-55"], ["-9", "0", "-1001"])
add("exclusive", {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 100}, ["1", "99", "50"], ["0", "100"])
add("lower_bound_only", {"type": "integer", "minimum": 18}, ["18", "19", "100", "123456"], ["17", "5", "-1"])
add("upper_bound_only", {"type": "integer", "maximum": 5}, ["5", "0", "-7", "-1000000"], ["6", "10"])
add("price", {"type": "number", "minimum": 0, "maximum": 100}, ["0", "99.99", "100", "100.0", "0.5"], ["100.5", "-1", "1e3"])
add("temperature", {"type": "number", "minimum": -40, "maximum": 60}, ["-40", "-39.5", "0", "59.999", "60"], ["-40.5", "60.01"])
add("string_lengths", obj({"code": {"type": "string", "minLength": 2, "maxLength": 4}}), styles({"code": "ab"}) + styles({"code": "abcd"}) + ['{"code":"é€"}'], ['{"code":"a"}', '{"code":"abcde"}'])
add("phone", obj({"phone": {"type": "string", "pattern": "^\\+?[0-9]{1,3}[- ]?[0-9]{3}[- ]?[0-9]{4}$"}}), styles({"phone": "+1 555-1234"}), ['{"phone":"555-12"}'])
add("slug", {"type": "string", "pattern": "^[a-z0-9]+(?:-[a-z0-9]+)*$"}, ['"hello-world"', '"a1"'], ['"Hello"', '"a--b"', '"-a"'])
add("contains_pattern", {"type": "string", "pattern": "cat"}, ['"cat"', '"concatenate"', '"a cat!"'], ['"dog"'])
add("hex_color", {"type": "string", "pattern": "^#([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$"}, ['"#fff"', '"#A0b1C2"'], ['"#ffff"', '"fff"'])
add("email_like", {"type": "string", "pattern": "^[\\w.+-]+@[\\w-]+\\.[\\w.]+$"}, ['"a.b+c@ex-ample.co.uk"'], ['"a@b"', '"@b.c"'])
add("quoted_pattern", {"type": "string", "pattern": "^say \"[a-z]+\"\\\\?$"}, ['"say \\"hi\\""', '"say \\"yo\\"\\\\"'], ['"say hi"'])
add("dates_list", {"type": "array", "items": {"type": "string", "format": "date"}, "maxItems": 4}, ['[]', '["2023-01-31","2023-04-30"]', '[ "1999-12-31" ]'], ['["2023-04-31"]', '["2023-1-1"]'])
add("uuid_map", {"type": "object", "additionalProperties": {"type": "string", "format": "uuid"}}, ['{}', '{"a":"00000000-0000-0000-0000-000000000000"}'], ['{"a":"x"}'])
add("free_map", {"type": "object", "additionalProperties": INT}, ['{"x":1,"y":-2}', '{}'], ['{"x":"1"}'])
add("any_object", {"type": "object"}, ['{}', '{"a":[1,{"b":null}]}'], ['[]'])
add("any_value", {}, ['1', '"s"', '[true,{"a":null}]', 'null'])
add("empty_object", {"type": "object", "additionalProperties": False}, ['{}', '{ }'], ['{"a":1}'])
add("anyof_shapes", {"anyOf": [obj({"kind": {"const": "circle"}, "r": NUM}), obj({"kind": {"const": "rect"}, "w": NUM, "h": NUM})]},
    styles({"kind": "circle", "r": 1.5}) + styles({"kind": "rect", "w": 2, "h": 3}), ['{"kind":"circle","w":1,"h":1}', '{"kind":"tri","r":1}'])
add("anyof_primitives", {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "enum": ["auto"]}]}, ['0', '42', '"auto"'], ['-1', '"manual"'])
add("booleans", obj({"enabled": BOOL, "flags": {"type": "array", "items": BOOL}}), styles({"enabled": True, "flags": [False, True]}), ['{"enabled":1,"flags":[]}'])
add("null_only", {"type": "null"}, ['null'], ['0', '"null"'])
add("chat_message", obj({"role": {"enum": ["system", "user", "assistant", "tool"]}, "content": STR, "name": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"}}, required=["role", "content"]),
    styles({"role": "user", "content": "Hello \"world\"\n\ttab é 😀"}) + styles({"role": "tool", "content": "", "name": "get_weather"}), ['{"role":"bot","content":"x"}', '{"role":"user","content":"x","name":"a b"}'])
add("function_def", obj({"name": STR, "description": STR, "parameters": obj({"type": {"const": "object"}, "properties": {"type": "object"}, "required": {"type": "array", "items": STR}})}),
    styles({"name": "f", "description": "d", "parameters": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}}))
add("invoice", obj({"number": {"type": "string", "pattern": "^INV-[0-9]{6}$"}, "issued": {"type": "string", "format": "date"}, "lines": {"type": "array", "items": obj({"desc": STR, "amount": {"type": "number", "minimum": 0}}), "minItems": 1, "maxItems": 50}, "paid": BOOL}),
    styles({"number": "INV-000123", "issued": "2024-06-30", "lines": [{"desc": "work", "amount": 100}, {"desc": "tax", "amount": 20.5}], "paid": False}), ['{"number":"INV-123","issued":"2024-06-30","lines":[{"desc":"w","amount":1}],"paid":false}'])
add("product_catalog", obj({"products": {"type": "array", "items": obj({"id": INT, "name": STR, "tags": {"type": "array", "items": STR}, "dimensions": obj({"w": NUM, "h": NUM, "d": NUM}, required=["w", "h"])})}}),
    styles({"products": [{"id": 1, "name": "box", "tags": ["a"], "dimensions": {"w": 1, "h": 2}}, {"id": 2, "name": "tube", "tags": [], "dimensions": {"w": 1, "h": 2, "d": 3}}]}))
add("log_entry", obj({"ts": {"type": "string", "format": "date-time"}, "level": {"enum": ["debug", "info", "warn", "error"]}, "msg": STR, "ctx": {"type": "object", "additionalProperties": STR}}),
    styles({"ts": "2024-05-01T12:00:00Z", "level": "warn", "msg": "disk", "ctx": {"host": "a"}}), ['{"ts":"2024-05-01 12:00:00","level":"warn","msg":"d","ctx":{}}'])
add("geo_point", obj({"lat": {"type": "number", "minimum": -90, "maximum": 90}, "lon": {"type": "number", "minimum": -180, "maximum": 180}}),
    styles({"lat": 48.8566, "lon": 2.3522}) + ['{"lat":-90,"lon":180}'], ['{"lat":91,"lon":0}', '{"lat":0,"lon":-180.5}'])
add("pagination", obj({"page": {"type": "integer", "minimum": 1}, "per_page": {"type": "integer", "minimum": 1, "maximum": 100}, "total": {"type": "integer", "minimum": 0}}),
    styles({"page": 3, "per_page": 25, "total": 1000}), ['{"page":0,"per_page":25,"total":1}', '{"page":1,"per_page":101,"total":1}'])
add("recipe", obj({"title": STR, "servings": {"type": "integer", "minimum": 1, "maximum": 12}, "ingredients": {"type": "array", "items": obj({"item": STR, "grams": {"type": "number", "minimum": 0}}), "minItems": 1}, "steps": {"type": "array", "items": STR}}),
    styles({"title": "Tea", "servings": 2, "ingredients": [{"item": "leaves", "grams": 5}], "steps": ["boil", "steep"]}))
add("classification", obj({"categories": {"type": "array", "items": {"enum": ["bug", "feature", "question", "docs"]}, "minItems": 1, "maxItems": 2}, "priority": {"type": "integer", "minimum": 1, "maximum": 5}}),
    styles({"categories": ["bug"], "priority": 1}) + styles({"categories": ["docs", "question"], "priority": 5}), ['{"categories":[],"priority":1}', '{"categories":["bug"],"priority":6}'])
add("definitions_keyword", {"definitions": {"id": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3}$"}}, "type": "object", "properties": {"a": {"$ref": "#/definitions/id"}, "b": {"$ref": "#/definitions/id"}}, "required": ["a", "b"], "additionalProperties": False},
    styles({"a": "AB123", "b": "ZZ999"}), ['{"a":"AB12","b":"ZZ999"}'])
add("json_expr", {"$defs": {"expr": {"anyOf": [{"type": "integer"}, obj({"op": {"enum": ["+", "*"]}, "args": {"type": "array", "items": {"$ref": "#/$defs/expr"}, "minItems": 2, "maxItems": 2}})]}}, "$ref": "#/$defs/expr"},
    styles({"op": "+", "args": [1, {"op": "*", "args": [2, 3]}]}) + ["7"], ['{"op":"-","args":[1,2]}', '{"op":"+","args":[1]}'])
add("unicode_text", obj({"text": STR, "lang": {"enum": ["ja", "fr", "de"]}}), styles({"text": "日本語のテキスト、こんにちは", "lang": "ja"}) + styles({"text": "Ça va? Grüße — “quotes”", "lang": "fr"}))
add("deep_nesting", obj({"a": obj({"b": obj({"c": obj({"d": obj({"e": {"type": "array", "items": INT}})})})})}), styles({"a": {"b": {"c": {"d": {"e": [1, 2, 3]}}}}}))

fc = Draft202012Validator.FORMAT_CHECKER  # draft 2020-12 formats (time with an offset, RFC 3339)
for s in S:
    v = Draft202012Validator(s["schema"], format_checker=fc)
    for t in s["valid"]:
        assert v.is_valid(json.loads(t)), (s["name"], t)
    for t in s["invalid"]:
        try:
            ok = v.is_valid(json.loads(t))
        except json.JSONDecodeError:
            ok = False
        assert not ok, (s["name"], t)
assert len(S) >= 50, len(S)
json.dump(S, sys.stdout, ensure_ascii=False, indent=1)
sys.stdout.write("\n")
