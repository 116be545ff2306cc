"""`tools.lazy_imports`: an import of routeforge inside a function is found, with or without its
`# lazy:` reason, and every one in the package has its reason (`make lint` runs both)."""

from tools import lazy_imports


def test_a_function_level_import_is_found_with_its_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(lazy_imports, "REPO", tmp_path)
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "thing.py").write_text(
        "import routeforge.core\n\n"
        "def a():\n    from routeforge.core.storage import Quarantine\n    return Quarantine\n\n"
        "def b():\n    from routeforge.core.config import (  # lazy: pydantic on first use\n"
        "        FleetConfig,\n    )\n    import json\n    return FleetConfig, json\n")
    found = lazy_imports.function_imports(tmp_path / "training" / "thing.py")
    assert [(i.line, i.importer, i.imported, i.reason) for i in found] == [
        (4, "routeforge.training.thing", "routeforge.core.storage", None),
        (8, "routeforge.training.thing", "routeforge.core.config", "pydantic on first use")]


def test_every_function_level_import_of_the_package_says_what_it_keeps_out():
    bare = [f"{i.path}:{i.line}" for i in lazy_imports.every_function_import() if not i.reason]
    assert bare == []
