#!/usr/bin/env python3
"""The programmatic-dependent-launch rule of src/kernels/cuda/launch.cuh (CTest py_pdl_rule).

With PDL on, a kernel's blocks start while the previous kernel still runs; only griddepcontrol.wait
(pdl_wait / pdl_enter) orders them. A kernel that forgot it would race on the GPU, silently and
only sometimes, so the rule is checked on the source: every __global__ function in
src/kernels/cuda begins with pdl_enter(); or pdl_wait(); (a prologue before pdl_wait() is allowed
where a comment in it starting "PDL:" says why it touches no memory another kernel writes), and
no launch bypasses detail::launch (no <<< >>> and no cudaLaunchKernel outside launch.cuh).
Also checks the checker: a kernel without the call is reported."""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KDIR = os.path.join(ROOT, "src", "kernels", "cuda")


def strip_comments(s):
    return re.sub(r"//[^\n]*", "", s)


def past_match(src, i, pair="()"):
    """The index just past the bracket that closes the one at src[i]."""
    depth = 0
    while True:
        depth += {pair[0]: 1, pair[1]: -1}.get(src[i], 0)
        i += 1
        if depth == 0:
            return i


def kernels(src):
    """(name, body) of each __global__ definition in src."""
    out = []
    for m in re.finditer(r"__global__", src):
        i = m.end()
        # The parameter list: the first '(' after the name (skip __launch_bounds__(...)).
        lb = re.match(r"\s*(void\s+)?__launch_bounds__\s*\(", src[i:])
        if lb:
            i = past_match(src, i + lb.end() - 1)
        p = src.index("(", i)
        name = src[i:p].split()[-1] if src[i:p].split() else "?"
        j = past_match(src, p)
        brace = src.find("{", j)
        if brace < 0 or ";" in src[j:brace]:
            continue  # a declaration
        k = past_match(src, brace, "{}")
        out.append((name, src[brace + 1:k - 1]))
    return out


def violations(src):
    bad = []
    for name, body in kernels(src):
        code = strip_comments(body).strip()
        if code.startswith("pdl_enter();") or code.startswith("pdl_wait();"):
            continue
        w = [i for i in (body.find("pdl_wait();"), body.find("pdl_enter();")) if i >= 0]
        if w and "PDL:" in body[:min(w)]:
            continue
        bad.append(name)
    return bad


def main():
    fails = []
    files = sorted(glob.glob(os.path.join(KDIR, "*.cu")) + glob.glob(os.path.join(KDIR, "*.cuh")))
    n = 0
    for f in files:
        src = open(f).read()
        n += len(kernels(src))
        for name in violations(src):
            fails.append(f"{os.path.relpath(f, ROOT)}: kernel {name} does not begin with pdl_enter() / pdl_wait()")
        if not f.endswith("launch.cuh"):
            code = strip_comments(src)
            if "<<<" in code or re.search(r"\bcudaLaunchKernel(Ex|ExC)?\s*\(", code):
                fails.append(f"{os.path.relpath(f, ROOT)}: a launch outside detail::launch (launch.cuh)")
    for f in glob.glob(os.path.join(ROOT, "src", "**", "*.c*"), recursive=True):
        if not f.startswith(KDIR) and "<<<" in strip_comments(open(f).read()):
            fails.append(f"{os.path.relpath(f, ROOT)}: a kernel launch outside src/kernels/cuda")
    # The checker itself: these must be caught / accepted.
    assert violations("__global__ void k(int* x) {\n  x[0] = 1;\n  pdl_enter();\n}") == ["k"]
    assert violations("__global__ void __launch_bounds__(256, 2) k(int* x) {\n  x[0] = 1;\n}") == ["k"]
    assert violations("__global__ void k(int* x) {\n  // why\n  pdl_enter();\n  x[0] = 1;\n}") == []
    assert violations("__global__ void k(const int* w) {\n  // PDL: weights only\n  f(w);\n  pdl_wait();\n}") == []
    assert violations("__global__ void k(int* x);\n") == []
    if n < 40:
        fails.append(f"only {n} kernels found in {KDIR}: the scan is broken")
    if fails:
        sys.exit("FAIL:\n" + "\n".join(fails))
    print(f"ok: {n} kernels in {len(files)} files enter through pdl_enter / pdl_wait")


main()
