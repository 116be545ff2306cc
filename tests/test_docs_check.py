"""`tools/check_docs.py` (run by `make lint`) tells a stale code reference from words that only look
like one: the names the issue found stale fail, config keys and tags pass."""

from pathlib import Path

from tools.check_docs import capability_problems, link_problems, problem


def test_stale_names_are_caught():
    assert "defines no registry_lock" in problem("artifacts.bundle.registry.registry_lock")
    assert problem("tests/pipelines/test_judge.py") == "no file tests/pipelines/test_judge.py"
    assert problem("python -m pipelines.generation") == "no module pipelines.generation"
    assert "defines no nothing_here" in problem("training/embeddings.nothing_here")
    assert "no file named" in problem("no_such_module.py")


def test_live_names_and_words_that_are_not_code_pass():
    for reference in ("registry.store.registry_lock", "routeforge.artifacts.deciding.heuristics.queue_biases",
                      "python -m routeforge.pipelines.run", "training/embeddings.SAVE_EVERY",
                      "tests/test_end_to_end.py::test_the_runtime_alone_serves_the_demo_bundle",
                      "benchmarks/results/<name>/", "src/safetensors.ts", "gate.py",
                      # a config key, an MLflow tag, a bundle's file, another package's module
                      "registry.signing_key", "routeforge.step", "manifest.json",
                      "python -m vllm.entrypoints.openai.api_server"):
        assert problem(reference) is None, reference


def test_a_link_to_a_missing_heading_or_file_is_caught(tmp_path):
    (tmp_path / "other.md").write_text("# Title\n\n## A section (`x.py`)\n")
    doc = tmp_path / "doc.md"
    text = "[ok](other.md#a-section-xpy) [gone](missing.md) [bad](other.md#nope) [web](https://example.org/x)\n"
    found = [message for _, message in link_problems(doc, text)]
    assert found == ["links to missing.md, which does not exist", "links to other.md#nope: no such heading"]


def test_the_shipped_docs_pass():
    from tools.check_docs import main

    assert main() == 0, "run .venv/bin/python -m tools.check_docs"
    assert Path(__file__).resolve().parent.parent.joinpath("CHANGELOG.md").is_file()


def test_a_capability_called_done_and_not_built_or_told_at_length_is_caught():
    """Issue 73, item 7: docs/capabilities.md called the bundle format for a second language done in one
    row and "not built" in the next, and several rows were single cells of over 1,000 characters."""
    table = ("| capability | state |\n|---|---|\n"
             "| a bundle format a second language loads | done ([details](notes.md#format)) |\n"
             "| bundle format for a second language | not built ([details](notes.md#format)) |\n"
             f"| prompts | done: {'x' * 500} ([details](notes.md#prompts)) |\n"
             "| judges | finished |\n\nprose after the table | not a row |\n")
    found = [message for _, message in capability_problems(table)]
    assert len(found) == 4, found
    assert "notes.md#format is in the table twice (line 3)" in found[0]
    assert "over 400" in found[1]
    assert "does not start with one of" in found[2] and "links no [details]" in found[3]
