"""Which components of two bundles are byte-identical and which differ, file by file, from their signed
manifests: how a change is shown to leave a bundle's behaviour alone (issue 63: `make demo` before and
after a refactor), next to the same commit run twice (what a run's own measurements change).

    .venv/bin/python -m benchmarks.bundle_diff A/manifest.json B/manifest.json [--name NAME]

Each argument is a bundle's manifest.json (a folder, or `by-digest/<digest>/` in a bundle cache).
Writes `benchmarks/results/bundle_diff/<name>.json`.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.common import parser, results_dir


def diff(a: dict, b: dict) -> dict:
    """{identical: [component], differs: {component: [file]}, only_in_a / only_in_b: [component]}."""
    ca = {c["name"]: {f["path"]: f["sha256"] for f in c["files"]} for c in a["components"]}
    cb = {c["name"]: {f["path"]: f["sha256"] for f in c["files"]} for c in b["components"]}
    identical, differs = [], {}
    for name in sorted(set(ca) & set(cb)):
        files = sorted(p for p in set(ca[name]) | set(cb[name]) if ca[name].get(p) != cb[name].get(p))
        if files:
            differs[name] = files
        else:
            identical.append(name)
    return {"identical": identical, "differs": differs, "only_in_a": sorted(set(ca) - set(cb)),
            "only_in_b": sorted(set(cb) - set(ca))}


def main() -> None:
    p = parser(__doc__)
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    p.add_argument("--name", default="bundle_diff")
    args = p.parse_args()
    a, b = (json.loads(path.read_text()) for path in (args.a, args.b))
    result = {"a": {"manifest": str(args.a), "version": a.get("version"), "code_version": a.get("code_version")},
              "b": {"manifest": str(args.b), "version": b.get("version"), "code_version": b.get("code_version")},
              **diff(a, b)}
    out = results_dir("bundle_diff") / f"{args.name}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{len(result['identical'])} components identical; differ: "
          + (", ".join(f"{n} ({', '.join(Path(f).name for f in files)})" for n, files in result["differs"].items())
             or "none"))
    print(f"results in {out}")


if __name__ == "__main__":
    main()
