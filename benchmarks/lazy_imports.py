"""What each function-level import of routeforge keeps out of its module's import, measured.

For every import `tools.lazy_imports` lists (module F importing module M inside a function), a fresh
interpreter imports F, then times `import M`: the milliseconds F's import would gain with M at its
top, less whatever F already pulled in. Each pair is timed `--repeats` times (the median kept) in
fresh interpreters, one pair at a time so the timings do not share the machine's cores.

    python -m benchmarks.lazy_imports [--repeats 3]     # writes benchmarks/results/lazy_imports/
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections import Counter

from benchmarks.common import results_dir
from tools.lazy_imports import every_function_import

PROBE = ("import collections, importlib, json, sys, time\n"
         "importlib.import_module(sys.argv[1])\n"
         "before = set(sys.modules)\n"
         "t = time.perf_counter()\n"
         "importlib.import_module(sys.argv[2])\n"
         "ms = (time.perf_counter() - t) * 1000\n"
         "new = collections.Counter(m.split('.')[0] for m in set(sys.modules) - before\n"
         "                          if not m.startswith('routeforge'))\n"
         "print(json.dumps([ms, [name for name, _ in new.most_common(3)]]))\n")


def marginal(importer: str, imported: str, repeats: int) -> tuple[float, list[str]]:
    """(the median milliseconds of `import imported` after `import importer`, the third-party packages it
    brings in, most modules first)."""
    runs, brings = [], []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", PROBE, importer, imported], capture_output=True, text=True,
                             timeout=300, check=True)
        ms, brings = json.loads(out.stdout.strip().splitlines()[-1])
        runs.append(float(ms))
    return statistics.median(runs), brings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    found = every_function_import()
    pairs = sorted({(i.importer, i.imported) for i in found})
    cost = {}
    for n, (importer, imported) in enumerate(pairs, start=1):
        cost[(importer, imported)] = marginal(importer, imported, args.repeats)
        print(f"[{n}/{len(pairs)}] {importer} -> {imported}: {cost[(importer, imported)][0]:.1f} ms "
              f"({', '.join(cost[(importer, imported)][1]) or 'nothing third-party'})", flush=True)
    rows = [{"path": i.path, "line": i.line, "importer": i.importer, "imported": i.imported, "reason": i.reason,
             "marginal_import_ms": round(cost[(i.importer, i.imported)][0], 1),
             "brings": cost[(i.importer, i.imported)][1]} for i in found]
    heavy = sorted(rows, key=lambda r: -r["marginal_import_ms"])
    costs = [r["marginal_import_ms"] for r in rows]
    summary = {"function_level_imports": len(rows), "files": len(Counter(r["path"] for r in rows)),
               "repeats": args.repeats, "python": sys.version.split()[0],
               "median_marginal_ms": round(statistics.median(costs), 1) if costs else None,
               "under_10_ms": sum(r["marginal_import_ms"] < 10 for r in rows), "rows": heavy}
    folder = results_dir("lazy_imports")
    (folder / "lazy_imports.json").write_text(json.dumps(summary, indent=2))
    print(f"{len(rows)} function-level imports in {summary['files']} files; {summary['under_10_ms']} add under 10 ms; "
          f"written to {folder / 'lazy_imports.json'}")


if __name__ == "__main__":
    main()
