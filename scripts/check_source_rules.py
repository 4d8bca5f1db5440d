#!/usr/bin/env python3
"""Rules of the source tree that the compiler cannot check (run by ctest as `source_rules`).

1. No process-wide mutable state under src/: no thread_local, no ThreadPool::global(), no
   mutable `static` variables (function-local or at namespace scope), no namespace-scope
   std::atomic / std::mutex. Immutable tables (`static const`, `constexpr`) are fine.
2. The engine knows no model family: nothing under src/engine/ includes a header of a
   src/models/<family>/ folder (the registry, src/models/model.h and registry.h, is the way in).
3. No file under src/ is longer than 600 lines (split it by responsibility first).
4. Models compute only through ops (the device seam): the model code under src/models/ (every
   file but the request side: processors, chat templates, configs, weight tables, tiny
   checkpoints) uses no thread pool (`pool()`, `parallel_for`, core/thread_pool.h), no CPU
   backend internals (kernels/cpu/) and moves no activation memory itself (`memcpy`, `copy_n`,
   `std::copy`, `memset`): copies are kernels::copy2d and the other layout ops, so they run on
   whatever device the backend is.
5. The engine's step contract (src/engine/step.h) stays plain data that names no host-only
   type: no raw pointers, spans of floats, thread pools, buffer caches, media contexts or KV
   storage.
6. Backends stay in their folders: only src/kernels/ includes kernels/cpu/ or kernels/cuda/
   headers, apart from the CPU-specific tools, benches and tests outside src/.

Prints every violation as file:line: rule, and exits 1 if there is any.
"""
import os
import re
import sys

# The tree to check: this repository, or the folder given as the only argument (the self-test).
ROOT = (os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "src")
MAX_LINES = 600

MUTABLE_STATIC = re.compile(
    r"^\s*static\s+(?!const\b|constexpr\b|inline\b|_assert)"
    r"[A-Za-z_][\w:<>,\s\*&]*?[\s\*&](?P<name>[A-Za-z_]\w*)\s*(=(?!=)|\{|;)")
NAMESPACE_SYNC = re.compile(r"^(std::atomic\b|std::atomic<|std::mutex\b|std::once_flag\b)")
FAMILY_INCLUDE = re.compile(r'#\s*include\s*"models/(?P<family>[^/"]+)/')
# Rule 4: the request side of src/models (host work by design) is exempt.
MODEL_HOST_SIDE = re.compile(
    r"(processor|chat_template|config|weights_spec|tiny_|anyres|token_pruning|checkpoint|"
    r"registry|model_spec|feature_extractor|model\.(h|cpp)$)")
MODEL_HOST_WORK = re.compile(
    r"(\bpool\(\)|\bparallel_for\w*\(|core/thread_pool\.h|kernels/cpu/|\bmemcpy\(|"
    r"\bcopy_n\(|std::copy\(|\bmemset\()")
STEP_HOST_TYPE = re.compile(
    r"(float\s*\*|void\s*\*|std::span<\s*(const\s+)?float|ThreadPool|BufferCache|MediaContext|"
    r"KvCache\b|HostContext)")
BACKEND_INCLUDE = re.compile(r'#\s*include\s*"kernels/(cpu|cuda)/')


def strip_comments(line, in_block):
    out = ""
    i = 0
    while i < len(line):
        if in_block:
            j = line.find("*/", i)
            if j < 0:
                return out, True
            i = j + 2
            in_block = False
            continue
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            in_block = True
            i += 2
            continue
        if line[i] == '"':  # skip string literals
            j = i + 1
            while j < len(line) and line[j] != '"':
                j += 2 if line[j] == "\\" else 1
            out += '""'
            i = j + 1
            continue
        out += line[i]
        i += 1
    return out, in_block


def main():
    problems = []
    for dirpath, _, files in os.walk(SRC):
        for f in sorted(files):
            if not f.endswith((".h", ".cpp")):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, ROOT)
            with open(path, encoding="utf-8") as fh:
                lines = fh.read().split("\n")
            if lines and lines[-1] == "":
                lines.pop()
            if len(lines) > MAX_LINES:
                problems.append(f"{rel}: {len(lines)} lines (more than {MAX_LINES}): split it")
            in_engine = rel.startswith(os.path.join("src", "engine") + os.sep)
            in_kernels = rel.startswith(os.path.join("src", "kernels") + os.sep)
            model_compute = (rel.startswith(os.path.join("src", "models") + os.sep) and
                             not MODEL_HOST_SIDE.search(f))
            step_contract = rel == os.path.join("src", "engine", "step.h")
            in_block = False
            for n, raw in enumerate(lines, 1):
                code, in_block = strip_comments(raw, in_block)
                if "thread_local" in code:
                    problems.append(f"{rel}:{n}: thread_local state (per-thread state belongs to "
                                    "an owner: a Backend's scratch, a StatePool)")
                if "::global()" in code or "set_global_threads" in code:
                    problems.append(f"{rel}:{n}: a process-wide thread pool (pass a Backend)")
                m = MUTABLE_STATIC.match(code)
                if m and "(" not in code.split(m.group("name"))[0]:
                    problems.append(f"{rel}:{n}: mutable static variable '{m.group('name')}' "
                                    "(make it const, or give it an owner)")
                if NAMESPACE_SYNC.match(code):
                    problems.append(f"{rel}:{n}: namespace-scope synchronised state (give it an "
                                    "owner)")
                if model_compute:
                    hm = MODEL_HOST_WORK.search(code if "#" not in raw else raw)
                    if hm:
                        problems.append(f"{rel}:{n}: model code does host work itself "
                                        f"('{hm.group(1)}'): go through a kernels op (copy2d, "
                                        "im2col_1d, patchify_2d, ...) so it runs on any device")
                if step_contract:
                    sm = STEP_HOST_TYPE.search(code)
                    if sm:
                        problems.append(f"{rel}:{n}: the step contract names a host-only type "
                                        f"('{sm.group(1)}'): keep it plain data")
                if not in_kernels:
                    bm = BACKEND_INCLUDE.search(raw)
                    if bm:
                        problems.append(f"{rel}:{n}: includes a backend's own header "
                                        f"(kernels/{bm.group(1)}/): go through kernels/backend.h "
                                        "and the op headers")
                if in_engine:
                    fm = FAMILY_INCLUDE.search(code if '"' not in raw else raw)
                    if fm:
                        problems.append(f"{rel}:{n}: the engine includes a header of model family "
                                        f"'{fm.group('family')}' (go through models/model.h)")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} source rule violation(s)")
        return 1
    print("source rules: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
