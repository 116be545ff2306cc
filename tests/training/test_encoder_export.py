"""The sentence encoder's ONNX export is made once per machine and encoder (`shared_export`) and copied
into each fleet's component folder, where it is checked against its recorded digest; a damaged shared
export is made again, not copied."""

from __future__ import annotations

import pytest
from routeforge.core.pretrained import ENCODER_PACKAGE_REF
from routeforge.training import encoder_export
from routeforge.training.encoder_export import export_key, export_sentence_encoder, shared_export


def test_a_new_folder_copies_the_shared_export_and_a_damaged_one_is_made_again(tmp_path, monkeypatch):
    monkeypatch.setenv(encoder_export.SHARED_CACHE_ENV, str(tmp_path / "exports"))
    made = []
    real = encoder_export._export
    monkeypatch.setattr(encoder_export, "_export", lambda ref, folder: made.append(folder) or real(ref, folder))
    first = export_sentence_encoder(ENCODER_PACKAGE_REF, tmp_path / "fleet-a" / "sentence_encoder")
    second = export_sentence_encoder(ENCODER_PACKAGE_REF, tmp_path / "fleet-b" / "sentence_encoder")
    shared = shared_export(ENCODER_PACKAGE_REF)
    assert made == [shared] and shared.name == export_key(ENCODER_PACKAGE_REF)  # exported once, in the cache
    graph = encoder_export.ENCODER_GRAPH
    assert (second.folder / graph).read_bytes() == (first.folder / graph).read_bytes() == (shared / graph).read_bytes()
    assert second.metrics == first.metrics and second.metrics["parity/min_cosine"] >= 0.9999
    # a damaged shared export verifies no more: the next new folder makes it again
    (shared / graph).write_bytes(b"not a graph")
    export_sentence_encoder(ENCODER_PACKAGE_REF, tmp_path / "fleet-c" / "sentence_encoder")
    assert made == [shared, shared]
    # a folder that already holds a verifying export is kept as it is, without the cache
    monkeypatch.setenv(encoder_export.SHARED_CACHE_ENV, str(tmp_path / "elsewhere"))
    export_sentence_encoder(ENCODER_PACKAGE_REF, tmp_path / "fleet-a" / "sentence_encoder")
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize("library", ["torch", "sentence-transformers"])
def test_the_export_key_moves_with_the_libraries_that_write_the_graph(monkeypatch, library):
    from importlib import metadata

    before = export_key(ENCODER_PACKAGE_REF)
    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "0.0-other" if name == library else real(name))
    assert export_key(ENCODER_PACKAGE_REF) != before
