#!/usr/bin/env python3
"""Import circles between the modules of each crate (CONTRIBUTING.md).

    scripts/module-cycles.py            # every crate under crates/
    scripts/module-cycles.py dq-server  # one crate

For each crate it reads every `src/**/*.rs` (a file's `#[cfg(test)] mod
tests` block and comments left out), notes which module names which
(`crate::a::b`, `super::b`, and `crate::Name` for a name the crate root
re-exports), lifts each reference to the two sibling modules under their
common parent (`crate::service::jobs` naming `crate::schedule::rule` is
service -> schedule), and prints every strongly connected set of siblings
larger than one: a circle. Exit status 1 when there is one.

It reads text, not Rust's name resolution: a nested `use` group or a glob
re-export can hide an edge. It is a check to run, not a proof.
"""
import os
import re
import sys


def modules(src):
    """Module path ('a::b', '' for the root) -> source text."""
    out = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(root, f)
            parts = os.path.relpath(path, src)[:-3].split("/")
            if parts[-1] in ("mod", "lib", "main"):
                parts = parts[:-1]
            if parts and parts[-1] == "tests":
                continue
            text = open(path, encoding="utf-8").read()
            cut = text.find("#[cfg(test)]\nmod tests")
            if cut >= 0:
                text = text[:cut]
            out["::".join(parts)] = re.sub(r"//.*", "", text)
    return out


def edges(mods):
    root = mods.get("", "")
    reexported = {}
    for mod, names in re.findall(r"pub(?:\(crate\))? use ([a-z_][a-z0-9_]*)::\{([^}]*)\}", root):
        for name in names.split(","):
            reexported[name.strip().split(" ")[0]] = mod
    for mod, name in re.findall(
        r"pub(?:\(crate\))? use ([a-z_][a-z0-9_]*)::(?:[a-z_0-9]+::)*([A-Za-z_][A-Za-z0-9_]*);", root
    ):
        reexported[name] = mod
    found = set()
    for m, text in mods.items():
        if not m:
            continue
        # `use crate::{a::X, B}` as `crate::a::X` and `crate::B`.
        for group in re.findall(r"\bcrate::\{([^}]*)\}", text):
            text += "".join(f" crate::{item.strip()} " for item in group.split(","))
        for name in re.findall(r"\bcrate::([A-Z][A-Za-z0-9_]*)", text):
            target = reexported.get(name)
            if target in mods and not (m + "::").startswith(target + "::"):
                found.add((m, target))
        for ref in re.findall(r"\bcrate::([a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*)", text):
            parts = ref.split("::")
            for k in range(len(parts), 0, -1):
                target = "::".join(parts[:k])
                if target in mods:
                    found.add((m, target))
                    break
        base = m.split("::")[:-1]
        for name in re.findall(r"\bsuper::([a-z_][a-z0-9_]*)", text):
            target = "::".join(base + [name])
            if target in mods:
                found.add((m, target))
    return found


def siblings(found):
    """Each edge lifted to the two siblings under the common parent."""
    lifted = set()
    for a, b in found:
        pa, pb = a.split("::"), b.split("::")
        k = 0
        while k < min(len(pa), len(pb)) and pa[k] == pb[k]:
            k += 1
        if k < len(pa) and k < len(pb):
            lifted.add(("::".join(pa[: k + 1]), "::".join(pb[: k + 1])))
    return lifted


def circles(graph):
    """Tarjan's strongly connected components larger than one."""
    nodes = sorted({n for e in graph for n in e})
    nexts = {n: sorted(b for a, b in graph if a == n) for n in nodes}
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in nexts[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            visit(v)
    return out


def main():
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates")
    crates = sys.argv[1:] or sorted(os.listdir(here))
    bad = False
    for crate in crates:
        found = circles(siblings(edges(modules(os.path.join(here, crate, "src")))))
        for c in found:
            print(f"{crate}: import circle between {', '.join(c)}")
            bad = True
    if not bad:
        print(f"no import circle between the modules of {len(crates)} crates")
    sys.exit(1 if bad else 0)


main()
