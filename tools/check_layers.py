#!/usr/bin/env python3
"""Checks nabla's include graph against the layers of ../shared/design/ARCHITECTURE.md.

Each top-level folder is one library, and a library may include only the libraries its arrow
names ("Who may include whom"). This script reads every `#include "nabla/<folder>/..."` and
`#include <...>` line of the libraries, the apps, the benchmarks and the tools (not examples/,
which use the installed API, nor tests/, which may look inside) and fails on:

  1. an upward include: a folder including a library its arrow does not name;
  2. a CUDA header (cuda_runtime.h, cudnn.h, cublasLt.h, nccl.h, a .cuh file, ...) included
     outside a `cuda/` folder: everything else compiles with a plain C++ compiler;
  3. an internal header used from outside its library: a header under a `detail/` folder, or
     one whose first line says "Internal", included from another library;
  4. a public header (installed, see cmake/NablaLibrary.cmake) that includes an internal one, so
     the installed headers would not compile;
  5. a header whose place and first line disagree: one marked "Internal" outside `detail/`, the
     step compiler's `fusion/` and the backend folders `cpu/` and `cuda/` (where nothing is
     installed but core/cuda's public runtime headers), or one in those folders not marked
     either way.

Cases the rules do not fit live in SHARED_INTERNALS and FOLDER_EXCEPTIONS below, each with its
reason; an entry that no longer matches anything is an error too, so the lists cannot go stale.

Usage: tools/check_layers.py [ROOT]   (ROOT defaults to the repository holding this script)
       tools/check_layers.py --self-test   (each rule must catch a deliberate break in a scratch tree)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# ARCHITECTURE.md, "Who may include whom". apps, bench and tools link everything.
LAYERS: dict[str, set[str]] = {
    "core": set(),
    "ops": {"core"},
    "nn": {"ops", "core"},
    "optim": {"ops", "core"},
    "amp": {"optim", "ops", "core"},
    "data": {"ops", "core"},
    "distributed": {"nn", "ops", "core"},
    "apps": {"core", "ops", "nn", "optim", "amp", "data", "distributed"},
    "bench": {"core", "ops", "nn", "optim", "amp", "data", "distributed", "apps"},
    "tools": {"core", "ops", "nn", "optim", "amp", "data", "distributed"},
}

# Headers that only a CUDA translation unit may include (system includes, <...> or "...").
CUDA_HEADER = re.compile(
    r"^(cuda|cuda_runtime|cuda_runtime_api|cuda_fp16|cuda_bf16|cudnn|cudnn_[a-z_]+|cublas|cublasLt|"
    r"cublas_v2|curand|curand_kernel|cufft|cupti|cupti_[a-z_]+|nccl|nvrtc|nvToolsExt|cooperative_groups|"
    r"cub/.*|thrust/.*|nvtx3/.*)\.(h|hpp|cuh)$|^cub/|^thrust/|^cooperative_groups/|\.cuh$"
)

# Internal headers that other libraries may use, and from which folders: (header or folder
# prefix, the user's folder must contain this part, reason).
SHARED_INTERNALS: list[tuple[str, str, str]] = [
    ("core/cuda/", "cuda",
     "the CUDA runtime's internals (status checks, per-thread handles, the device guard) serve "
     "every library's CUDA backend"),
    ("ops/cuda/elementwise/tensor_table.cuh", "cuda",
     "one table-of-tensors launcher serves the multi-tensor kernels of ops, optim and amp"),
]

# Folders a rule does not hold for: (folder prefix, rule, reason).
FOLDER_EXCEPTIONS: list[tuple[str, str, str]] = [
    ("bench/", "internal", "microbenchmarks time the backend kernels directly, as the parity tests do"),
    ("tools/cupti_trace/", "cuda-header", "a CUPTI profiling tool, built only with CUDA"),
]

# The installed libraries (apps, bench and tools install no headers).
LIBRARIES = {"core", "ops", "nn", "optim", "amp", "data", "distributed"}

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
SOURCE_SUFFIXES = {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh"}


def library_of(relative: Path) -> str | None:
    top = relative.parts[0]
    return top if top in LAYERS else None


def in_cuda_folder(relative: Path) -> bool:
    return "cuda" in relative.parts[:-1]


def first_line(header: Path) -> str:
    try:
        with header.open(encoding="utf-8", errors="replace") as f:
            return f.readline()
    except OSError:
        return ""


def in_internal_folder(relative: Path) -> bool:
    folders = relative.parts[:-1]
    # fusion/: the step compiler's internals (IR, planner, code generator), ops-only like detail/.
    return "detail" in folders or "cpu" in folders or "cuda" in folders or "fusion" in folders


def is_internal(header: Path) -> bool:
    if "detail" in header.parts[:-1]:
        return True
    line = first_line(header)
    if re.match(r"^//\s*Public header\b", line):
        return False
    return bool(re.match(r"^//\s*Internal\b", line)) or in_internal_folder(header)


def check(root: Path) -> list[str]:
    problems: list[str] = []
    used: set[str] = set()

    def excepted(relative: Path, rule: str) -> bool:
        for folder, what, _ in FOLDER_EXCEPTIONS:
            if what == rule and str(relative).startswith(folder):
                used.add(folder + what)
                return True
        return False

    def shared(included: Path, user: Path) -> bool:
        for owner, user_part, _ in SHARED_INTERNALS:
            if str(included).startswith(owner) and user_part in user.parts[:-1]:
                used.add(owner)
                return True
        return False

    for path in sorted(root.rglob("*")):
        if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
            continue
        relative = path.relative_to(root)
        if relative.parts[0] == "build" or relative.parts[0].startswith("."):
            continue
        library = library_of(relative)
        if library is None:
            continue
        is_header = path.suffix in {".h", ".hpp", ".cuh"}
        header_is_public = is_header and library in LIBRARIES and not is_internal(path)
        if is_header and library in LIBRARIES:
            line = first_line(path)
            marked_internal = bool(re.match(r"^//\s*Internal\b", line))
            marked_public = bool(re.match(r"^//\s*Public header\b", line))
            if marked_internal and not in_internal_folder(relative):
                problems.append(f"{relative}: marked Internal but outside detail/, cpu/, cuda/ and fusion/, so it is installed")
            elif in_internal_folder(relative) and not (marked_internal or marked_public):
                problems.append(f"{relative}: in an internal folder but marked neither Internal nor Public header")
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            match = INCLUDE.match(line)
            if not match:
                continue
            bracket, target = match.groups()
            where = f"{relative}:{number}"
            if CUDA_HEADER.search(target) and not in_cuda_folder(relative):
                if not excepted(relative, "cuda-header"):
                    problems.append(f"{where}: CUDA header <{target}> outside a cuda/ folder")
                continue
            if bracket != '"' or not target.startswith("nabla/"):
                continue
            included = Path(target.removeprefix("nabla/"))
            other = library_of(included)
            if header_is_public and other in LIBRARIES and is_internal(root / included):
                problems.append(f"{where}: the public header {relative} includes the internal {target}")
                continue
            if other is None or other == library:
                continue
            if other not in LAYERS[library]:
                problems.append(
                    f"{where}: {library}/ includes {target}, but {library} may include only "
                    f"{', '.join(sorted(LAYERS[library])) or 'nothing of nabla'} (ARCHITECTURE.md)"
                )
            elif is_internal(root / included) and not shared(included, relative) and not excepted(relative, "internal"):
                problems.append(f"{where}: {target} is internal to {other}/ and used from {library}/")
    for owner, _, reason in SHARED_INTERNALS:
        if owner not in used:
            problems.append(f"tools/check_layers.py: shared internal {owner} ({reason}) is used by no other library")
    for folder, rule, reason in FOLDER_EXCEPTIONS:
        if folder + rule not in used:
            problems.append(f"tools/check_layers.py: exception {folder} {rule} ({reason}) matches nothing")
    return problems


def self_test() -> int:
    """Writes small trees that break one rule each and checks that the rule catches it, so CI
    proves the check can fail (an upward include added by mistake is caught, not waved through)."""
    import tempfile

    cases = {
        "upward include": {"core/a.cpp": '#include "nabla/ops/b.h"\n', "ops/b.h": "// Public header.\n"},
        "CUDA header outside cuda/": {"ops/a.cpp": "#include <cuda_runtime.h>\n"},
        "internal header from another library": {
            "nn/a.cpp": '#include "nabla/ops/detail/b.h"\n', "ops/detail/b.h": "// Internal.\n"},
        "public header including an internal one": {
            "ops/a.h": '// Public header.\n#include "nabla/ops/detail/b.h"\n', "ops/detail/b.h": "// Internal.\n"},
    }
    failed = 0
    for name, files in cases.items():
        with tempfile.TemporaryDirectory() as scratch:
            root = Path(scratch)
            for relative, text in files.items():
                (root / relative).parent.mkdir(parents=True, exist_ok=True)
                (root / relative).write_text(text)
            found = [p for p in check(root) if not p.startswith("tools/check_layers.py")]
            if not found:
                print(f"check_layers self-test: '{name}' was not caught", file=sys.stderr)
                failed += 1
    if failed:
        return 1
    print(f"check_layers self-test: all {len(cases)} deliberate breaks caught")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) > 1 and argv[1] == "--self-test":
        return self_test()
    root = Path(argv[1]).resolve() if len(argv) > 1 else Path(__file__).resolve().parent.parent
    problems = check(root)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"check_layers: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print("check_layers: the include graph follows ARCHITECTURE.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
