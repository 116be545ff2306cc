"""The files a fleet file points at, checked before anything runs.

Every field typed `ConfigPath` (dataset files, score and response tables, task lookups, traces, the
signing key, ...) names an input that must exist; `config validate` and `pipelines.run` list the ones
that do not, each with its field's dotted path, instead of failing minutes later inside a stage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, get_args, get_origin

from pydantic import AfterValidator, BaseModel
from routeforge.core.config.base import ConfigError, _resolve_path
from routeforge.core.config.data_columns import column_problems, task_problems, trace_problems
from routeforge.core.config.data_rows import row_problems
from routeforge.core.config.fleet import load_fleet
from routeforge.core.kinds import PROFILE_KINDS


def _is_file_validator(meta: Any) -> bool:
    return isinstance(meta, AfterValidator) and meta.func is _resolve_path


def _names_a_file(annotation: Any, metadata: tuple = ()) -> bool:
    """Whether a field's type is ConfigPath, or a container / union holding one. (Pydantic keeps a
    field's own `Annotated` as annotation + metadata; nested ones stay `Annotated`.)"""
    if any(_is_file_validator(m) for m in metadata):
        return True
    if get_origin(annotation) is Annotated:
        base, *meta = get_args(annotation)
        return any(_is_file_validator(m) for m in meta) or _names_a_file(base)
    return any(_names_a_file(arg) for arg in get_args(annotation))


def _paths(value: Any, where: str, files: bool):
    """Paths under a value: bare ones only where the field names files (`files`), and those of any
    nested configuration model's own file fields."""
    if isinstance(value, Path):
        if files:
            yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, f"{where}.{key}", files)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _paths(item, f"{where}.{i}", files)
    elif isinstance(value, BaseModel):
        yield from referenced_files(value, where)


def referenced_files(model: BaseModel, prefix: str = "") -> list[tuple[str, Path]]:
    """(dotted field, path) for every file or folder the configuration names as an input."""
    out: list[tuple[str, Path]] = []
    for name, field in type(model).model_fields.items():
        where = f"{prefix}.{name}" if prefix else name
        out += list(_paths(getattr(model, name), where, _names_a_file(field.annotation, tuple(field.metadata))))
    return out


def missing_files(model: BaseModel) -> list[str]:
    """'field: path' for each referenced input that does not exist."""
    return [f"{where}: {path} does not exist" for where, path in referenced_files(model) if not path.exists()]


def profile_problems(config) -> list[str]:
    """What each tier's profile kind finds wrong in the files it names (the kind's `check`: a published
    file's `key` that is not in it), with the field's dotted path."""
    out = []
    for i, tier in enumerate(config.tiers):
        check = tier.profile and PROFILE_KINDS.entry(tier.profile.kind).metadata.get("check")
        if check:
            out += [f"tiers.{i} ({tier.name}).profile.{problem}" for problem in check(tier.profile)]
    return out


def load_checked(path) -> Any:
    """`load_fleet(path)`, and ConfigError naming every referenced input that does not exist or holds
    no row or is not UTF-8, every score-table model named otherwise than the table names it
    (`data_rows`), every mapped column its file lacks, every `per_task` key no dataset's files name
    and every column the trace lacks (`data_columns`), and every tier profile whose files do not hold
    what it names (`profile_problems`)."""
    config = load_fleet(path)
    missing = missing_files(config)
    if missing:
        raise ConfigError(f"fleet config {Path(path).resolve()}: {'; '.join(missing)}")
    problems = (row_problems(config)[0] + column_problems(config) + task_problems(config)[0]
                + trace_problems(config) + profile_problems(config))
    if problems:
        raise ConfigError(f"fleet config {Path(path).resolve()}: {'; '.join(problems)}")
    return config
