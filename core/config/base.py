"""What every fleet-config model shares: strictness, the error type, and path fields resolved by type.

A relative path in a fleet file means "relative to that file", so a config behaves the same from any
working directory. Fields say which kind of value they hold by their type, and validation resolves
them against the file's folder (passed as the validation context by `load_fleet`):

- `ConfigPath`: a local file or folder (made absolute);
- `ModelRef`: a hub id, a `package:` reference or a local folder (made absolute only when it names
  an existing local path or starts with `.`, so `gpt2` stays a hub id);
- `StoreUri`: a URI such as `sqlite:///rel/path.db` (the path part resolved) or `http://...` (kept);
- `StorageLocation`: a local folder (made absolute, as a `Path`; `file://` URIs too) or an fsspec
  URI such as `s3://bucket/prefix` (kept as a string).

A model built directly in Python (no context) keeps its values as given.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Annotated, Any, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo
from routeforge.core.storage_root import is_uri

CONFIG_DIR = "config_dir"  # the validation-context key holding the fleet file's folder


class ConfigError(ValueError):
    """A fleet file that cannot be used; the message names the file and the offending field."""


class _Strict(BaseModel):
    # NaN and infinities are refused in every number of a fleet file (`.nan`, `.inf` and 1e999 are
    # YAML floats: a NaN load or an infinite price validated, then broke the run or its figures)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# the public name of every settings model's base (unknown keys are errors; settings never change once
# read), for an extension's own settings (a learned policy's `settings_model`)
StrictSettings = _Strict


# a model, hardware or fleet name: it becomes file names, metric keys and bundle paths. Slash-separated
# segments (RouterBench's `mistralai/mixtral-8x7b-chat`), each starting with a letter or digit, so no
# `..`, no leading `/`, no whitespace or control character
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+@-]*(/[A-Za-z0-9][A-Za-z0-9._:+@-]*)*")


def reachable_models(root: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """Every configuration model reachable from `root`'s fields (in lists, unions, mappings), by
    class name, as pydantic names its JSON Schema `$defs`: what "did you mean" compares an unknown
    key with, and what the schema's descriptions are read from."""
    found: dict[str, type[BaseModel]] = {}
    stack: list[Any] = [root]
    while stack:
        item = stack.pop()
        if isinstance(item, type) and issubclass(item, BaseModel):
            if item.__name__ not in found:
                found[item.__name__] = item
                stack += [f.annotation for f in item.model_fields.values()]
        else:
            stack += list(get_args(item))
    return found


def did_you_mean(given: str, choices) -> str:
    """' (did you mean 'x'?)' when one of `choices` is close to `given`, else ''."""
    close = difflib.get_close_matches(given, list(choices), n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


def plain_name(value: str) -> str:
    if len(value) > 128 or not _NAME.fullmatch(value):
        raise ValueError(f"{value!r} is not a plain name: letters, digits and . _ - : + @, in '/'-separated parts "
                         "that each start with a letter or digit (no '..', spaces or control characters), "
                         "at most 128 characters")
    return value


Name = Annotated[str, AfterValidator(plain_name)]


def resolve_relative(value: str, base: Path) -> str:
    """Resolve a sqlite URI or plain path relative to `base`; leave other URIs and hub ids alone."""
    if value.startswith("sqlite:///") and not value.startswith("sqlite:////"):
        return "sqlite:///" + str((base / value[len("sqlite:///") :]).resolve())
    if "://" in value or value.startswith(("package:", "/")):
        return value
    candidate = base / value
    return str(candidate.resolve()) if value.startswith(".") or candidate.exists() else value


def _base(info: ValidationInfo) -> Path | None:
    context = info.context or {}
    return context.get(CONFIG_DIR)


def _resolve_path(value: Path, info: ValidationInfo) -> Path:
    base = _base(info)
    path = value if base is None or value.is_absolute() else (base / value).resolve()
    if path.exists() and not (path.is_file() or path.is_dir()):
        # a reader given /dev/zero or a pipe reads forever (1.9 GB in 25 s), never an error
        raise ValueError(f"{path} is a device, pipe or socket: a regular file or folder is required")
    return path


def _resolve_ref(value: str, info: ValidationInfo) -> str:
    base = _base(info)
    return value if base is None else resolve_relative(value, base)


ConfigPath = Annotated[Path, AfterValidator(_resolve_path)]
ModelRef = Annotated[str, AfterValidator(_resolve_ref)]
StoreUri = Annotated[str, AfterValidator(_resolve_ref)]


def _resolve_location(value: str | Path, info: ValidationInfo) -> str | Path:
    text = str(value)
    if text.startswith("file://"):
        text = text[len("file://"):]
    elif is_uri(text):
        return text.rstrip("/")
    return _resolve_path(Path(text).expanduser(), info)


StorageLocation = Annotated[str | Path, AfterValidator(_resolve_location)]


class OneOf:
    """`Annotated[str, OneOf(REGISTRY)]`: a field whose value names a registered kind
    (`artifacts.common.extensions.Registry`). Validation asks the registry (an unknown name says the close
    one and every known one), and the JSON Schema's `enum` is the registry's names when the schema is
    written, so a new module is the only change a new kind needs. `extra`: values the field takes
    besides the registered names (`auto`). `where`: a metadata key the kind must have registered
    true (a sweep's `arrival` takes only the workloads that are arrival processes)."""

    def __init__(self, registry, extra: tuple[str, ...] = (), where: str | None = None):
        self.registry, self.extra, self.where = registry, extra, where

    def __get_pydantic_core_schema__(self, source, handler):
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(self, schema, handler):
        out = handler(schema)
        out["enum"] = [*self.extra, *self.allowed()]
        return out

    def allowed(self) -> list[str]:
        if self.where is None:
            return self.registry.names()
        return sorted(e.name for e in self.registry.entries() if e.metadata.get(self.where))

    def _check(self, value: str) -> str:
        if value in self.extra:
            return value
        if value not in self.registry:
            raise ValueError(self.registry.unknown(value))
        if self.where is not None and not self.registry.entry(value).metadata.get(self.where):
            raise ValueError(f"{self.registry.kind} {value!r} cannot be used here (these can: "
                             f"{', '.join(self.allowed())})")
        return value
