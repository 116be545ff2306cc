"""The registries are the only lists of kinds (issue 51): no code branches on a registered engine,
metric, reader, heuristic or dataset kind by name, and no hand-kept mapping is keyed by them; what a kind can do is
the metadata its module registered. And Dagster is used through its public API only."""
import ast
import re
import subprocess
from pathlib import Path
from typing import get_args

from routeforge.artifacts.deciding.heuristics import HEURISTICS
from routeforge.artifacts.deciding.policy import ACTION_KINDS
from routeforge.artifacts.deciding.policy_inputs.base import POLICY_INPUTS
from routeforge.artifacts.deciding.router import MEMBER_KINDS
from routeforge.core.kinds import DATASET_KINDS, ENGINES, METRICS, PROFILE_KINDS, READERS, SOURCE_KINDS, WORKLOADS

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("artifacts", "assets", "core", "generation", "pipelines", "profiling", "prompts", "registry", "scoring",
            "training")
# what a branch on a kind's name compares: the field that holds the name. `kind` names several open sets
# (a dataset's, a tier profile's, …): a comparison of any `kind` with any of their names is a branch
KIND_FIELDS = {"engine": ENGINES, "metric": METRICS, "reader": READERS, "heuristic": HEURISTICS,
               "workloads": WORKLOADS, "workload": WORKLOADS, "arrival": WORKLOADS,
               "kind": {*DATASET_KINDS.names(), *PROFILE_KINDS.names(), *ACTION_KINDS.names(), *SOURCE_KINDS.names(), *WORKLOADS.names(),
                        *POLICY_INPUTS.names()}}
# mappings keyed by registered names that are not lists of kinds, with why
ALLOWED_MAPPINGS = {
    # the simulator's own classes for the built-in heuristics: faster than the runtime functions, and held
    # equal to them (tests/extensions); every other heuristic runs through its registered function
    ("training/policies/simulator/baselines.py", "NATIVE"),
}


def _sources():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(), filename=str(path))


def _field(node) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _strings(node) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def test_no_code_branches_on_a_registered_kinds_name():
    found = []
    for path, tree in _sources():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            fields = {_field(s) for s in sides} & set(KIND_FIELDS)
            for name in fields:
                named = [v for s in sides for v in _strings(s) if v in KIND_FIELDS[name]]
                if named:
                    found.append(f"{path}:{node.lineno}: {name} compared with {named}")
    assert not found, "branches on registered names (ask the registry's metadata instead):\n" + "\n".join(found)


def test_no_hand_kept_mapping_of_registered_kinds():
    registries = [ENGINES, METRICS, READERS, HEURISTICS, DATASET_KINDS, MEMBER_KINDS, PROFILE_KINDS, ACTION_KINDS, SOURCE_KINDS, WORKLOADS,
                  POLICY_INPUTS]
    found = []
    for path, tree in _sources():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Dict):
                continue
            keys = {k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            target = _field(node.targets[0]) or "?"
            for registry in registries:
                if len(keys & set(registry.names())) >= 2 and (path, target) not in ALLOWED_MAPPINGS:
                    found.append(f"{path}:{node.lineno}: {target} is keyed by {registry.kind} names")
    assert not found, "mappings that list registered kinds by hand:\n" + "\n".join(found)


def test_dagster_is_used_through_its_public_api():
    """`dagster._…` is Dagster's internals, which change between minor releases: none in any Python file
    of the repository (the package, its tests, benchmarks, docs and tools), tracked by git."""
    private = re.compile(r"^\s*(from|import)\s+dagster\._", re.M)
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    files = [ROOT / name for name in tracked.stdout.split()]
    found = {path.relative_to(ROOT).as_posix(): len(hits) for path in files if path.exists()
             for hits in [private.findall(path.read_text())] if hits}
    assert len(files) > 300 and found == {}, found


def test_every_dataset_kind_of_the_fleet_file_has_a_registered_reader_and_no_other():
    """A dataset kind's settings are a model of the fleet schema (core/config/datasets.py), its reading a
    registered function: the two lists name the same kinds."""

    from routeforge.core.config.datasets import Dataset

    union, _ = get_args(Dataset)
    kinds = {k for model in get_args(union) for k in get_args(model.model_fields["kind"].annotation)}
    assert kinds == set(DATASET_KINDS.names())


def test_the_teachers_the_fleet_file_may_name_are_the_trainers_candidates_and_simulator_baselines():
    """The RL trainers' teacher candidates are the heuristics registered as teachers (simplest first, by
    their registered `teacher_order`) and their simulator variants; the fleet file's choices are read
    from the same registrations, and each runs in the simulator."""
    from routeforge.training.policies.learned.settings import TeacherName
    from routeforge.training.policies.rl.teacher import teachers
    from routeforge.training.policies.simulator.baselines import BASELINES

    one_of = get_args(TeacherName)[1]
    assert set(one_of.allowed()) | set(one_of.extra) - {"auto"} == set(teachers("load")) | set(teachers("prefix"))
    assert teachers("load") == ("join_shortest_queue", "earliest_available", "least_work_left", "route_balance",
                                "route_balance_absolute")
    assert set(teachers("load")) | set(teachers("prefix")) <= set(BASELINES)


def test_every_model_source_kind_of_the_fleet_file_is_registered_and_no_other():
    """A source kind is its settings model in the `ModelSource` union and its registration in
    `core/model_sources.py` (identity in the response cache, where its weights are)."""
    from routeforge.core.config.models import ModelSource

    union = get_args(get_args(ModelSource)[0])
    assert {get_args(m.model_fields["kind"].annotation)[0] for m in union} == set(SOURCE_KINDS.names())



def test_no_registry_discovers_a_layer_above_its_own():
    """Issue 63: a registry's discovery imports its own layer and those below (the layer contract sees the
    rest: `routeforge.fleet` imports the kinds of the layers above `core`); a lookup before that names it."""
    import subprocess
    import sys
    import tomllib

    import routeforge.pipelines.definitions  # noqa: F401  (every layer imported)
    from routeforge.artifacts.common.extensions import Registry

    contract = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]
    layers = [[name.strip() for name in entry.split(":")] for entry in contract["layers"]]

    def depth(module: str) -> int:
        part = module.split(".")[1]
        return next(i for i, names in enumerate(layers) if part in names)

    registries = {id(v): v for m in list(sys.modules.values()) if getattr(m, "__name__", "").startswith("routeforge.")
                  for v in vars(m).values() if isinstance(v, Registry)}
    assert len(registries) >= 10
    for registry in registries.values():
        for package in registry.packages:
            assert depth(package) >= depth(registry.owner), (registry.kind, registry.owner, package)
    # in a process that has not loaded them, the kinds of the layers above say what to import
    probe = ("from routeforge.core.kinds import ENGINES\n"
             "try:\n    ENGINES.names()\nexcept Exception as exc:\n    print(type(exc).__name__, exc)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120).stdout
    assert out.startswith("KindsNotLoaded") and "import routeforge.fleet first" in out
