"""The bundle: what it holds (`manifest`), how it is written (`writer`) and signed (`signing`), which keys
are trusted (`keyring`), how it is verified before any use (`verification`), fetched from MLflow
(`registry`, `download`, `bundle_cache`, `shared_components`, `model_record`) and loaded into a
`RouterBundle` (`loader`) whose components `deciding` computes with."""
