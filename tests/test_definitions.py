import os
import subprocess
import sys

from tests.conftest import CONFIGS, REPO

HEAVY = ("torch", "transformers", "sentence_transformers", "faiss", "mlflow", "bert_score", "datasets")


def _python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_loading_definitions_imports_no_model_library():
    out = _python(f"import sys, routeforge.pipelines.definitions as d; d.defs(); "
                  f"print([m for m in {HEAVY!r} if m in sys.modules])")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_partitions_follow_the_fleet_file(shared_data):
    code = ("import routeforge.pipelines.definitions as d; "
            "print(len(d.defs().resolve_assets_def('responses').partitions_def.get_partition_keys()))")
    assert _python(code).stdout.strip() == "3"
    rb = _python(code, ROUTEFORGE_CONFIG=str(CONFIGS / "routerbench.yaml"), ROUTEFORGE_DATA=str(shared_data))
    assert rb.stdout.strip() == "11", rb.stderr


def test_dagster_validates_the_code_location(tmp_path):
    out = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "dagster"), "definitions", "validate", "-w",
         "workspace.yaml"],
        cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, "DAGSTER_HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Validation successful" in out.stdout + out.stderr
    assert "routeforge" in out.stdout + out.stderr  # the code location's name, as the UI shows it


def test_every_asset_check_says_what_it_checks():
    from routeforge.pipelines.definitions import build_definitions

    graph = build_definitions(CONFIGS / "demo.yaml").resolve_asset_graph()
    checks = [graph.get_check_spec(key) for key in graph.asset_check_keys]
    assert len(checks) >= 9
    assert all(spec.description and len(spec.description) > 30 for spec in checks), [
        spec.key.name for spec in checks if not spec.description]


def test_plots_are_inline_images_in_dagster_metadata(tmp_path):
    import base64

    import dagster as dg
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from routeforge.assets.metadata import inline_plot, plot_entries

    path = tmp_path / "curve.png"
    plt.plot([0, 1], [1, 0])
    plt.savefig(path)
    plt.close()
    value = inline_plot(path)
    assert isinstance(value, dg.MarkdownMetadataValue)
    encoded = value.md_str.split("data:image/png;base64,")[1].split(")")[0]
    assert base64.b64decode(encoded) == path.read_bytes()
    assert set(plot_entries([path])) == {"plot_curve"}


def test_the_repository_dagster_yaml_makes_a_working_instance(tmp_path):
    import shutil

    shutil.copy(REPO / "dagster.yaml", tmp_path / "dagster.yaml")
    code = ("import dagster as dg; i = dg.DagsterInstance.from_config('.'); "
            "print(type(i.run_coordinator).__name__, i.get_concurrency_config().pool_config.default_pool_limit)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["QueuedRunCoordinator", "1"]


def test_cli_materializes_prompts_then_model_partitions(tmp_path, state_dir):
    """The CLI path: one run per model partition (a UI backfill launches the same runs via the daemon)."""
    import shutil

    shutil.copy(REPO / "dagster.yaml", tmp_path / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path), "ROUTEFORGE_STATE": str(state_dir)}
    exe = os.path.join(os.path.dirname(sys.executable), "dagster")
    base = [exe, "asset", "materialize", "-m", "routeforge.pipelines.definitions"]
    first = subprocess.run(base + ["--select", "prompts"], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    for model in ("tiny-gpt2", "tiny-llama"):
        run = subprocess.run(base + ["--select", "responses", "--partition", model], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
    files = sorted(p.name for p in (state_dir / "demo" / "assets" / "responses").iterdir())
    assert files == ["tiny-gpt2.parquet", "tiny-llama.parquet"]


def test_routing_evaluation_feeds_the_bundle_where_enabled(shared_data):
    code = ("import routeforge.pipelines.definitions as d, dagster as dg; g = d.defs().resolve_asset_graph(); "
            "keys = {k.to_user_string() for k in g.get_all_asset_keys()}; "
            "print('routing_evaluation' in keys, "
            "'routing_evaluation' in keys and dg.AssetKey('routing_evaluation') in "
            "g.get(dg.AssetKey('router_bundle')).parent_keys)")
    assert _python(code).stdout.split() == ["True", "True"]
    rb = _python(code, ROUTEFORGE_CONFIG=str(CONFIGS / "routerbench.yaml"), ROUTEFORGE_DATA=str(shared_data))
    assert rb.stdout.split() == ["False", "False"], rb.stderr  # no profiled tiers: nothing to simulate


def test_one_list_of_trainers_drives_assets_job_bundle_and_summary(shared_data, monkeypatch):
    """Each trainer is declared once (`routeforge.assets.trainers`); the fleet's enabled ones are the
    assets built, the training job's selection, the bundle's inputs and the run summary's keys."""
    import dagster as dg
    from routeforge.assets.trainers import TRAIN_JOB, all_trainers, enabled_trainers
    from routeforge.core.config import load_fleet
    from routeforge.pipelines.definitions import build_definitions, training_assets

    monkeypatch.setenv("ROUTEFORGE_DATA", str(shared_data))
    names = [t.name for t in all_trainers()]
    assert names[:2] == ["knn_estimator", "router_selection"] and len(set(t.rank for t in all_trainers())) == len(names)
    for fleet in ("demo", "routerbench"):
        config = load_fleet(CONFIGS / f"{fleet}.yaml")
        enabled = enabled_trainers(config)
        defs = build_definitions(CONFIGS / f"{fleet}.yaml")
        graph = defs.resolve_asset_graph()
        built = {k.to_user_string() for k in graph.get_all_asset_keys()}
        assert {t.name for t in enabled} <= built
        assert not ({t.name for t in all_trainers()} - {t.name for t in enabled}) & built  # disabled: absent
        bundle_inputs = [k.to_user_string() for k in graph.get(dg.AssetKey("router_bundle")).parent_keys]
        assert set(bundle_inputs) == {t.name for t in enabled} | {"routing_table", "prompts"}
        assert {t.name for t in enabled if t.job == TRAIN_JOB} <= set(training_assets(config))
        for t in enabled:  # what a trainer says it reads is what its asset reads
            parents = {k.to_user_string() for k in graph.get(dg.AssetKey(t.name)).parent_keys}
            assert parents <= set(t.inputs), (t.name, parents)


def test_asset_groups_follow_the_stages_and_every_asset_has_kinds():
    """Lineage opens as five boxes of the pipeline's stages, none holding a lone asset; a tier's
    profile and its latency heads sit together; kinds say what each asset is made of."""
    from routeforge.pipelines.definitions import build_definitions

    graph = build_definitions(CONFIGS / "demo.yaml").resolve_asset_graph()
    groups: dict[str, set[str]] = {}
    for key in graph.get_all_asset_keys():
        groups.setdefault(graph.get(key).group_name, set()).add(key.to_user_string())
    from routeforge.pipelines.ui import STAGE_GROUPS

    assert set(groups) == set(STAGE_GROUPS), groups  # the groups `make ui`'s lineage link opens
    assert all(len(members) >= 2 for members in groups.values()), groups
    assert {"tier_profiles", "latency_heads"} <= groups["latency"]
    assert {"prompts", "responses", "quality", "routing_table"} <= groups["labels"]
    kinds = {key.to_user_string(): graph.get(key).kinds for key in graph.get_all_asset_keys()}
    assert all(kinds.values()), kinds
    assert "mlflow" in kinds["router_selection"] and "xgboost" in kinds["latency_heads"]
