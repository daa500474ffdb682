#!/usr/bin/env python3
"""Fails when a header includes a layer that scripts/layers.txt does not allow, when a layer
folder is missing from that file, or when examples/ include bench/ (examples are what users copy).

Usage: scripts/check_layers.py            (from anywhere; prints every violation, exit 1 if any)
"""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
include_re = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]')


def read_layers():
    allowed = {}
    for n, line in enumerate((root / "scripts/layers.txt").read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if ":" not in line:
            sys.exit(f"scripts/layers.txt:{n}: expected 'layer: allowed...', got {line!r}")
        name, deps = line.split(":", 1)
        allowed[name.strip()] = set(deps.split())
    for name, deps in allowed.items():
        for d in deps:
            if d not in allowed:
                sys.exit(f"scripts/layers.txt: layer {name!r} lists unknown layer {d!r}")
    return allowed


def main():
    allowed = read_layers()
    errors = []
    base = root / "include/inferkit"
    for folder in sorted(p for p in base.iterdir() if p.is_dir()):
        if folder.name not in allowed:
            errors.append(f"include/inferkit/{folder.name}/: a layer scripts/layers.txt does not list")
    for header in sorted(base.rglob("*.hpp")):
        rel = header.relative_to(base)
        if len(rel.parts) < 2:
            continue  # inferkit.hpp, version.hpp: the umbrella may include every layer
        layer = rel.parts[0]
        for n, line in enumerate(header.read_text().splitlines(), 1):
            m = include_re.match(line)
            if not m or not m.group(1).startswith("inferkit/"):
                continue
            parts = m.group(1).split("/")
            if len(parts) < 3:
                continue  # inferkit/version.hpp
            target = parts[1]
            if target != layer and target not in allowed.get(layer, set()):
                errors.append(f"include/inferkit/{rel}:{n}: layer {layer!r} includes {m.group(1)!r} "
                              f"(layer {target!r}); allowed: {sorted(allowed.get(layer, set())) or 'none'}")
    for src in sorted((root / "examples").rglob("*.[ch]pp")):
        for n, line in enumerate(src.read_text().splitlines(), 1):
            m = include_re.match(line)
            if m and ("bench/" in m.group(1) or m.group(1).startswith("../")):
                errors.append(f"{src.relative_to(root)}:{n}: examples may not include {m.group(1)!r} "
                              "(examples use only the public headers and their own files)")
    for cm in sorted((root / "examples").rglob("CMakeLists.txt")):
        for n, line in enumerate(cm.read_text().splitlines(), 1):
            if "include_directories" in line and "/bench" in line:
                errors.append(f"{cm.relative_to(root)}:{n}: examples may not take headers from bench/")
    for e in errors:
        print(e)
    if errors:
        print(f"check_layers: {len(errors)} violation(s)", file=sys.stderr)
        return 1
    print(f"check_layers: {len(allowed)} layers, every include allowed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
