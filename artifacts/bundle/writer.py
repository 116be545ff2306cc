"""Assemble a bundle folder: copy component folders in, checksum every file, write the manifest."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from routeforge.artifacts.bundle.manifest import (
    MANIFEST_FILE,
    Component,
    FileEntry,
    Fleet,
    Lineage,
    Manifest,
    Provenance,
)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_entries(root: Path, folder: Path) -> list[FileEntry]:
    return [
        FileEntry(path=p.relative_to(root).as_posix(), sha256=sha256_file(p), bytes=p.stat().st_size)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    ]


def same_files(a: Path, b: Path) -> bool:
    """Both folders hold the same relative paths with the same bytes."""
    if Path(a).resolve() == Path(b).resolve():
        return True
    return [(e.path, e.sha256) for e in file_entries(a, a)] == [(e.path, e.sha256) for e in file_entries(b, b)]


@dataclass
class ComponentSource:
    name: str
    kind: str
    format: str
    folder: Path
    metrics: dict[str, float] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)


def write_bundle(
    target: Path,
    name: str,
    fleet: Fleet,
    components: list[ComponentSource],
    lineage: Lineage,
    code_version: str,
    provenance: Provenance | None = None,
) -> Manifest:
    """Write a fresh bundle at `target` (replaced if present) and return its manifest. Its content
    version hashes the component files and the `provenance` claims (a bundle whose claims differ is
    another bundle), not the timestamps, run ids or lineage."""
    target = Path(target)
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    entries = []
    written: dict[str, ComponentSource] = {}
    for comp in components:
        if comp.name in written:  # one component several trainers name (a shared embedding table)
            if not same_files(written[comp.name].folder, comp.folder):
                raise ValueError(f"two different components are both named {comp.name!r} "
                                 f"({written[comp.name].folder} and {comp.folder})")
            continue
        written[comp.name] = comp
        dest = target / comp.name
        shutil.copytree(comp.folder, dest)
        entries.append(
            Component(
                name=comp.name, kind=comp.kind, format=comp.format, files=file_entries(target, dest),
                metrics=comp.metrics, config=comp.config,
            )
        )
    provenance = provenance or Provenance()
    said = {k: v for k, v in dataclasses.asdict(provenance).items() if v is not None}
    claims = json.dumps(said, sort_keys=True) if said else ""  # none said: the version of a 1.0 bundle
    content = hashlib.sha256(("".join(f.sha256 for c in entries for f in c.files) + claims).encode()).hexdigest()
    manifest = Manifest(
        name=name,
        version=content[:12],
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        code_version=code_version,
        fleet=fleet,
        components=entries,
        lineage=lineage,
        provenance=provenance,
    )
    write_manifest(target, manifest)
    return manifest


def write_manifest(root: Path, manifest: Manifest) -> None:
    """(Re)write `root`'s manifest, e.g. once its lineage learns the MLflow run id."""
    (Path(root) / MANIFEST_FILE).write_text(manifest.to_json())
