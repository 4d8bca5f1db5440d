#!/usr/bin/env python3
"""The source-rule checker fires on each rule it claims: a scratch tree with one violation of
each (and the allowed forms next to them) must give exactly the expected findings."""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = {
    # rule 4: model compute code doing host work; the request side may
    "src/models/fam/encoder.cpp": 'be.pool().parallel_for(n, 1, f);\nstd::memcpy(a, b, n);\n'
                                  '#include "core/thread_pool.h"\nkernels::copy2d(be, a, 1, b, 1, 1, 1);\n',
    "src/models/fam/image_processor.cpp": "std::memcpy(a, b, n);\nctx.pool->parallel_for(n, 1, f);\n",
    # rule 5: host-only types in the step contract
    "src/engine/step.h": "struct StepPlan {\n  const float* rows;\n  std::vector<int32_t> ids;\n};\n",
    # rule 6: a backend header outside src/kernels
    "src/engine/executor.cpp": '#include "kernels/cpu/cpu_backend.h"\n#include "kernels/ops.h"\n',
    "src/kernels/registry.cpp": '#include "kernels/cuda/cuda_backend.h"\n',
}
EXPECTED = [
    ("src/models/fam/encoder.cpp:1", "host work"),
    ("src/models/fam/encoder.cpp:2", "host work"),
    ("src/models/fam/encoder.cpp:3", "host work"),
    ("src/engine/step.h:2", "host-only type"),
    ("src/engine/executor.cpp:1", "backend's own header"),
]

with tempfile.TemporaryDirectory() as d:
    for rel, text in FILES.items():
        os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
        with open(os.path.join(d, rel), "w") as f:
            f.write(text)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "check_source_rules.py"), d],
                       capture_output=True, text=True)
    lines = [l for l in r.stdout.splitlines() if ": " in l and not l.endswith("violation(s)")]
    ok = r.returncode == 1 and len(lines) == len(EXPECTED)
    for where, what in EXPECTED:
        hit = [l for l in lines if l.startswith(where + ":") and what in l]
        if not hit:
            print(f"missing finding: {where}: {what}")
            ok = False
    if not ok:
        print(r.stdout)
        sys.exit(1)
print(f"source rule checker: {len(EXPECTED)} planted violations found, nothing else")
