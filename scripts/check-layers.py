#!/usr/bin/env python3
"""Checks the include rules of iser's layers (docs/design.md section 2; ctest lint.layers).

The layers, bottom to top: core (src/core), cuda (src/cuda), runtime (src/runtime), moe (src/moe);
tools/, bench/, python/ and tests/ sit on top. A public header (include/iser/) belongs to the
layer whose list in cmake/layers.cmake names it; every public header must be in exactly one list.

Rules, for every file of include/iser, src, tools, bench and python:
  - each #include "..." resolves (as the compiler would) to a file of the same layer or a lower
    one;
  - a public header includes public headers only (no src/, bench/ or tests/ header), no CUDA,
    NCCL or cuBLAS header and no framework (torch, nanobind, Python) header, and declares no
    kernel (__global__ / __device__);
  - nothing below the bindings (src/, include/) includes a framework header;
  - every .cpp / .cu of src, tools, bench, python and tests/{core,gpu} is named in the
    CMakeLists.txt of its folder or of a folder above it (sources are listed, not globbed, so a
    file left out of every list would silently not be built).

Prints one line per violation and exits 1; exit 0 when clean. --self-test builds small trees with
known violations in a temporary folder and checks that each one is reported (and a clean tree is
not).
"""
import argparse
import os
import re
import sys
import tempfile

LAYERS = ["core", "cuda", "runtime", "moe"]
TOP = len(LAYERS)  # tools, bench, python, tests
LAYER_NAMES = LAYERS + ["top"]
SOURCE_SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")
CHECKED_DIRS = ["include/iser", "src", "tools", "bench", "python"]
TOP_DIRS = ("tools", "bench", "python", "tests")

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
HEADER_LIST_RE = re.compile(r"set\(\s*ISER_(\w+)_HEADERS\s+([^)]*)\)", re.S)
FRAMEWORK_RE = re.compile(r"^(torch/|ATen/|c10/|nanobind/|pybind11/|Python\.h$)")
DEVICE_RE = re.compile(r"^(cuda[\w.]*\.h$|cuda/|cub/|thrust/|nccl\.h$|cublas|curand|cusparse)")
KERNEL_RE = re.compile(r"\b__(global|device)__\b")


def read_header_layers(root):
    """Public header name -> layer rank, from cmake/layers.cmake; plus the list's own problems."""
    path = os.path.join(root, "cmake", "layers.cmake")
    problems = []
    layers = {}
    try:
        with open(path, encoding="utf-8") as f:
            text = re.sub(r"#[^\n]*", "", f.read())
    except OSError as e:
        return layers, [f"cmake/layers.cmake: cannot read ({e.strerror})"]
    for name, items in HEADER_LIST_RE.findall(text):
        layer = name.lower()
        if layer not in LAYERS:
            problems.append(f"cmake/layers.cmake: ISER_{name}_HEADERS names no layer")
            continue
        for header in items.split():
            if header in layers:
                problems.append(f"cmake/layers.cmake: {header} is listed in two layers")
            layers[header] = LAYERS.index(layer)
    public_dir = os.path.join(root, "include", "iser")
    present = set()
    for dirpath, _, names in os.walk(public_dir):
        for name in names:
            present.add(os.path.relpath(os.path.join(dirpath, name), public_dir).replace(os.sep, "/"))
    for header in sorted(present - set(layers)):
        if header.endswith(SOURCE_SUFFIXES):
            problems.append(f"include/iser/{header}: in no layer list of cmake/layers.cmake")
    for header in sorted(set(layers) - present):
        problems.append(f"cmake/layers.cmake: lists {header}, which include/iser/ lacks")
    return layers, problems


def layer_of(rel, header_layers):
    """Layer rank of a repository-relative path, or None where no layer applies."""
    parts = rel.split("/")
    if parts[0] == "include" and len(parts) >= 3 and parts[1] == "iser":
        return header_layers.get("/".join(parts[2:]))
    if parts[0] == "src" and len(parts) > 2:
        return LAYERS.index(parts[1]) if parts[1] in LAYERS else None
    if parts[0] in TOP_DIRS:
        return TOP
    return None


def resolve(root, rel, target):
    """The repository-relative file a quoted include names, searched as the build does."""
    dirs = [os.path.dirname(rel)]
    if rel.startswith("src/core/"):
        dirs.append("src/core")  # iser_core's private include folder
    dirs += ["include", "src", ""]
    for d in dirs:
        candidate = os.path.normpath(os.path.join(d, target))
        if not candidate.startswith("..") and os.path.isfile(os.path.join(root, candidate)):
            return candidate.replace(os.sep, "/")
    return None


def checked_files(root):
    for top in CHECKED_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "build")))
            for name in sorted(filenames):
                if name.endswith(SOURCE_SUFFIXES):
                    yield os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")


def check_file(root, rel, header_layers):
    problems = []
    layer = layer_of(rel, header_layers)
    if layer is None:
        if not rel.startswith("include/"):  # unlisted public headers are reported once, above
            problems.append(f"{rel}: in no layer (src/ holds {', '.join(LAYERS)} only)")
        return problems
    public = rel.startswith("include/")
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    for number, line in enumerate(lines, 1):
        where = f"{rel}:{number}"
        if public and KERNEL_RE.search(line.split("//", 1)[0]):
            problems.append(f"{where}: public header declares device code")
        m = INCLUDE_RE.match(line)
        if not m:
            continue
        quote, target = m.groups()
        if FRAMEWORK_RE.match(target) and layer < TOP:
            problems.append(f"{where}: includes framework header <{target}> below the bindings")
        if quote == "<":
            if public and DEVICE_RE.match(target):
                problems.append(f"{where}: public header includes <{target}>")
            continue
        resolved = resolve(root, rel, target)
        if resolved is None:
            problems.append(f'{where}: includes "{target}", which resolves to no file')
            continue
        if public and not resolved.startswith("include/iser/"):
            problems.append(f'{where}: public header includes non-public "{target}"')
            continue
        target_layer = layer_of(resolved, header_layers)
        if target_layer is None:
            problems.append(f'{where}: includes "{target}" ({resolved}), which is in no layer')
        elif target_layer > layer:
            problems.append(f'{where}: includes "{target}" of layer {LAYER_NAMES[target_layer]} '
                            f"from layer {LAYER_NAMES[layer]}")
    return problems


LISTED_DIRS = ["src", "tools", "bench", "python", "tests/core", "tests/gpu"]
UNIT_SUFFIXES = (".cpp", ".cc", ".cu")


def check_listed(root):
    """Every translation unit is named in a CMakeLists.txt at or above its folder."""
    problems = []
    texts = {}
    for top in LISTED_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "build")))
            for name in sorted(n for n in filenames if n.endswith(UNIT_SUFFIXES)):
                rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
                folder = os.path.dirname(rel)
                listed = False
                while not listed:
                    lists = os.path.join(root, folder, "CMakeLists.txt")
                    if lists not in texts:
                        try:
                            with open(lists, encoding="utf-8") as f:
                                texts[lists] = f.read()
                        except OSError:
                            texts[lists] = ""
                    own = rel[len(folder) + 1:] if folder else rel
                    listed = re.search(r"(^|[\s(])" + re.escape(own) + r"($|[\s)])",
                                       texts[lists], re.M) is not None
                    if not folder:
                        break
                    folder = os.path.dirname(folder)
                if not listed:
                    problems.append(f"{rel}: named in no CMakeLists.txt (not built)")
    return problems


def check(root):
    header_layers, problems = read_header_layers(root)
    for rel in checked_files(root):
        problems += check_file(root, rel, header_layers)
    return problems + check_listed(root)


# ---- self-test ----------------------------------------------------------------------------------

CLEAN_TREE = {
    "cmake/layers.cmake": "set(ISER_CORE_HEADERS plan.h)\nset(ISER_CUDA_HEADERS kern_api.h)\n"
                          "set(ISER_RUNTIME_HEADERS runtime.h)\nset(ISER_MOE_HEADERS moe.h)\n",
    "include/iser/plan.h": "#include <vector>\n",
    "include/iser/kern_api.h": '#include "iser/plan.h"\n',
    "include/iser/runtime.h": '#include "iser/kern_api.h"\n',
    "include/iser/moe.h": '#include "iser/runtime.h"\n',
    "src/core/plan.cpp": '#include "iser/plan.h"\n#include "trace/common.h"\n',
    "src/core/trace/common.h": '#include "iser/plan.h"\n',
    "src/core/trace/common.cpp": '#include "common.h"\n',
    "src/cuda/kernels.h": '#include <cuda_runtime.h>\n#include "iser/kern_api.h"\n',
    "src/cuda/kernels.cu": '#include "cuda/kernels.h"\n__global__ void k() {}\n',
    "src/runtime/runtime.cpp": '#include "cuda/kernels.h"\n#include "iser/runtime.h"\n',
    "src/moe/layer.cpp": '#include "iser/moe.h"\n#include "runtime/../cuda/kernels.h"\n',
    "tools/main.cpp": '#include "iser/moe.h"\n#include "bench/moe_bench.h"\n',
    "bench/moe_bench.h": '#include "moe/layer.h"\n',
    "src/moe/layer.h": "",
    "python/ext.cpp": '#include <torch/torch.h>\n#include "iser/moe.h"\n',
    "CMakeLists.txt": "add_executable(iser tools/main.cpp)\nadd_library(ext python/ext.cpp)\n",
    "src/core/CMakeLists.txt": "add_library(iser_core plan.cpp\n  trace/common.cpp)\n",
    "src/cuda/CMakeLists.txt": "add_library(iser_cuda kernels.cu)\n",
    "src/runtime/CMakeLists.txt": "add_library(iser_runtime runtime.cpp)\n",
    "src/moe/CMakeLists.txt": "add_library(iser_moe layer.cpp)\n",
}

# (file, content added to the clean tree, message the check must print)
SELF_TEST_CASES = [
    ("src/cuda/bad.h", '#include "iser/runtime.h"\n',
     'src/cuda/bad.h:1: includes "iser/runtime.h" of layer runtime from layer cuda'),
    ("src/runtime/bad.cpp", '#include "moe/layer.h"\n',
     'src/runtime/bad.cpp:1: includes "moe/layer.h" of layer moe from layer runtime'),
    ("src/core/bad.cpp", '#include "cuda/kernels.h"\n',
     'src/core/bad.cpp:1: includes "cuda/kernels.h" of layer cuda from layer core'),
    ("src/moe/bad.cpp", '#include "bench/moe_bench.h"\n',
     'src/moe/bad.cpp:1: includes "bench/moe_bench.h" of layer top from layer moe'),
    ("include/iser/moe.h", '#include "iser/runtime.h"\n#include "cuda/kernels.h"\n',
     'include/iser/moe.h:2: public header includes non-public "cuda/kernels.h"'),
    ("include/iser/runtime.h", "#include <cuda_runtime.h>\n",
     "include/iser/runtime.h:1: public header includes <cuda_runtime.h>"),
    ("include/iser/plan.h", "__global__ void k();\n",
     "include/iser/plan.h:1: public header declares device code"),
    ("include/iser/extra.h", "\n", "include/iser/extra.h: in no layer list of cmake/layers.cmake"),
    ("src/moe/torch_bad.cpp", "#include <torch/torch.h>\n",
     "src/moe/torch_bad.cpp:1: includes framework header <torch/torch.h> below the bindings"),
    ("src/cuda/missing.cu", '#include "cuda/gone.h"\n',
     'src/cuda/missing.cu:1: includes "cuda/gone.h", which resolves to no file'),
    ("src/misc/x.cpp", "\n", "src/misc/x.cpp: in no layer"),
    ("tests/gpu/test_new.cpp", "\n", "tests/gpu/test_new.cpp: named in no CMakeLists.txt (not built)"),
]


def write_tree(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def self_test():
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        clean = os.path.join(tmp, "clean")
        write_tree(clean, CLEAN_TREE)
        problems = check(clean)
        if problems:
            failures.append("clean tree reported: " + "; ".join(problems))
        for idx, (rel, text, expected) in enumerate(SELF_TEST_CASES):
            root = os.path.join(tmp, f"case{idx}")
            files = {**CLEAN_TREE, rel: text}
            if rel.endswith(UNIT_SUFFIXES) and not rel.startswith("tests/"):
                files["CMakeLists.txt"] += f"add_library(case {rel})\n"  # listed: only its own rule
            write_tree(root, files)
            problems = check(root)
            if not any(expected in p for p in problems):
                failures.append(f"{rel}: expected '{expected}', got {problems}")
            elif len(problems) != 1:
                failures.append(f"{rel}: expected one violation, got {problems}")
    for failure in failures:
        print(f"check-layers self-test: {failure}", file=sys.stderr)
    if not failures:
        print(f"check-layers self-test: {len(SELF_TEST_CASES)} violations caught, clean tree clean")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."),
                        help="repository root (default: the script's repository)")
    parser.add_argument("--self-test", action="store_true",
                        help="check that known violations are reported")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    root = os.path.abspath(args.root)
    problems = check(root)
    for problem in problems:
        print(f"check-layers: {problem}", file=sys.stderr)
    if problems:
        print(f"check-layers: {len(problems)} violation(s) of the layer rules "
              "(docs/design.md section 2)", file=sys.stderr)
        return 1
    print(f"check-layers: {sum(1 for _ in checked_files(root))} files follow the layer rules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
