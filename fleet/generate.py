"""`python -m routeforge.fleet.generate CONFIG [--model M]`: generate (or complete) the response cache of
one or more models for the fleet's prompt set, without Dagster; safe to kill and run again (the cache
is the one the pipeline reads, `generation.partition`). Here, not beside it, because reading a fleet
file needs every kind loaded (`routeforge.fleet`)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from routeforge.core.storage import write_parquet
from routeforge.fleet import load_fleet
from routeforge.generation.partition import generate_partition
from routeforge.prompts.sources import build_prompts


def main(argv: list[str] | None = None) -> int:
    """Generate (or complete) the cache of one or more models for the fleet's prompt set."""

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("config")
    parser.add_argument("--model", action="append", help="model name (repeatable; default: all)")
    parser.add_argument("--out", help="also write the assembled partition (one model) to this Parquet file")
    args = parser.parse_args(argv)
    config = load_fleet(args.config)
    if args.out and len(args.model or config.model_names) != 1:
        parser.error("--out writes one partition: name exactly one --model")
    prompts, _ = build_prompts(config)
    for model in args.model or config.model_names:
        result = generate_partition(config, model, prompts, log=lambda m: print(m, flush=True))
        print(f"{model}: {result.table.num_rows} rows, {result.generated} generated "
              f"({result.generated_output_tokens} tokens) in {result.generate_s:.1f}s, "
              f"{len(result.quarantine)} quarantined", flush=True)
        if args.out:
            write_parquet(result.table, Path(args.out))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
