"""Descriptions for the fleet file's JSON Schema, taken from the config models themselves: a field's
`Field(description=…)` where it has one, else the comment written beside it or on the lines just
above it in the model's source, and each model's docstring. The comments are where the project
documents its settings; reading them here means an editor shows the same words, and a field whose
meaning changes is re-described where it is changed."""

from __future__ import annotations

import inspect
import io
import re
import tokenize

from pydantic import BaseModel
from routeforge.core.config.base import reachable_models

_FIELD = re.compile(r"^\s+(\w+)\s*:")
# fields that mean the same in every model that has them (a union member's tag, a row limit)
COMMON = {"kind": "which of the alternatives this entry is; it decides which other fields apply",
          "limit": "read at most this many rows (None: all)"}


def comments_by_field(model: type[BaseModel]) -> dict[str, str]:
    """{field: comment} for the fields of `model` declared in its own class body: the trailing
    comment of the field's line, else the comment lines directly above it (joined)."""
    try:
        source = inspect.getsource(model)
    except (OSError, TypeError):
        return {}
    comments: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
    lines = source.splitlines()
    out: dict[str, str] = {}
    for number, line in enumerate(lines, start=1):
        match = _FIELD.match(line)
        if not match or match.group(1) not in model.model_fields:
            continue
        text = comments.get(number) if not line.lstrip().startswith("#") else None
        if not text:
            above, k = [], number - 1
            while k >= 1 and lines[k - 1].lstrip().startswith("#"):
                above.insert(0, comments.get(k, ""))
                k -= 1
            text = " ".join(a for a in above if a)
        if text:
            out.setdefault(match.group(1), text)
    return out


def describe(schema: dict, root: type[BaseModel]) -> dict:
    """`schema` (root's JSON Schema) with a description on every property and definition that has
    a comment or docstring to give it; what the schema already describes is kept."""
    models = reachable_models(root)

    def fill(node: dict, model: type[BaseModel] | None) -> None:
        if model is None:
            return
        doc = inspect.getdoc(model)
        if doc and "description" not in node and model.__doc__:
            node["description"] = doc
        notes = {}
        for cls in reversed(model.__mro__):  # a subclass's comment wins over its base's
            if isinstance(cls, type) and issubclass(cls, BaseModel) and cls is not BaseModel:
                notes |= comments_by_field(cls)
        for name, prop in node.get("properties", {}).items():
            field = model.model_fields.get(name)
            text = (field.description if field is not None and field.description else None) or notes.get(name)
            if text and "description" not in prop:
                prop["description"] = text

    fill(schema, root)
    defs = schema.get("$defs", {})
    for node in (schema, *defs.values()):  # the fields many models share, in words of their own
        for name, prop in node.get("properties", {}).items():
            if name in COMMON and "description" not in prop:
                prop["description"] = COMMON[name]
    for name, node in defs.items():
        fill(node, models.get(name))

    def referenced(prop: dict) -> list[str]:
        """The definitions a property's value is (directly, in a list, or in a union)."""
        refs = [prop["$ref"]] if "$ref" in prop else []
        for key in ("anyOf", "oneOf", "allOf"):
            refs += [r for option in prop.get(key, []) for r in referenced(option)]
        if isinstance(prop.get("items"), dict):
            refs += referenced(prop["items"])
        if isinstance(prop.get("additionalProperties"), dict):
            refs += referenced(prop["additionalProperties"])
        return refs

    # a field without words of its own whose value is a model: the first sentence of that model's doc
    for node in (schema, *defs.values()):
        for prop in node.get("properties", {}).values():
            if "description" in prop:
                continue
            docs = [defs.get(r.rsplit("/", 1)[-1], {}).get("description") for r in referenced(prop)]
            docs = list(dict.fromkeys(d.split(". ")[0].split("\n\n")[0].strip() for d in docs if d))
            if docs:
                prop["description"] = " | ".join(docs)
    return schema


def properties(schema: dict, where: str = "<root>") -> list[tuple[str, dict]]:
    """("<object>.<property>", property) for every property of the schema, its definitions and the
    objects nested in them (the learned policies' settings sit inline under `learned`)."""
    out = []
    nodes = [(where, schema)] + ([(name, node) for name, node in schema.get("$defs", {}).items()]
                                  if where == "<root>" else [])
    for name, node in nodes:
        for key, prop in node.get("properties", {}).items():
            out.append((f"{name}.{key}", prop))
            if "properties" in prop:
                out += properties(prop, f"{name}.{key}")
    return out


def coverage(schema: dict) -> tuple[int, int]:
    """(properties with a description, properties) over the schema, its definitions and what they nest."""
    props = [p for _, p in properties(schema)]
    return sum("description" in p for p in props), len(props)
