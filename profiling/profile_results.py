"""What a tier's profile kind measured, as one of a few types, and the profile that carries it.

Why types: a profile's summary was a dict read by its keys in three places (the latency component,
the `tier_profiles` asset's metadata, the routing evaluation's simulated fleet), each guessing its
kind from which keys it held. A kind's `measure()` now returns one of these, and each reader
dispatches on the type:

- `MeasuredBatches`: static batches in `batches.parquet` (measured in-process, through a server's
  API, or published), the tier's prefill/decode fit and its plot: heads trained on the batches, and
  a fit the simulator runs;
- `FittedPrior`: published end-to-end rows fitted to a coarse prior (the heads' static prediction)
  and to the continuous-batching step model the simulator runs;
- `SweepRecords`: a QPS sweep's timed requests in `sweep.parquet` with each phase's summary;
- `TrafficRecords`: production's timed requests replayed into the sweep's record format.

`profile.json` is `TierProfile.to_json()`: the tier, kind and key, then the result's fields as they
were before the types (so profiles kept from earlier runs read back, and data versions stay).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar


@dataclass(frozen=True)
class MeasuredBatches:
    """Static batches and the tier's fit (`profiling.batch_fits.TierFit.to_dict()`)."""

    measurements: int
    fit: dict[str, Any]
    plot: str
    base_url: str | None = None  # a server's, where the batches went through its API
    served_model: str | None = None

    @property
    def simulator_fit(self) -> dict[str, Any]:
        return self.fit

    def to_json(self) -> dict[str, Any]:
        """Its fields; the server's only where the batches went through one (as the kinds wrote them)."""
        return {k: v for k, v in asdict(self).items() if v is not None or k not in ("base_url", "served_model")}


@dataclass(frozen=True)
class FittedPrior:
    """A coarse prior (`coarse_priors.CoarsePrior.to_dict()`) and the step-model fit for the simulator."""

    prior: dict[str, Any]
    simulator_fit: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SweepRecords:
    """A QPS sweep: its request count, offered rates, saturation and each phase's summary."""

    requests: int
    rates: list[float]
    saturation_rps: float
    saturation_output_tok_s: float
    phases: list[dict[str, Any]]
    server_metrics_endpoint: bool
    state_agreement: dict[str, Any] | None = None  # the client's dead reckoning against the server's counters
    simulator_fit: ClassVar[None] = None  # a sweep gives no step fit the simulator runs

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TrafficRecords:
    """Production's timed requests for the tier, and the log lines quarantined on the way."""

    requests: int
    logged_requests: int
    quarantined: int
    quarantine_reasons: dict[str, int] = field(default_factory=dict)
    simulator_fit: ClassVar[None] = None

    def to_json(self) -> dict[str, Any]:
        """Its fields, marked `traffic` (what tells its records from a sweep's in `profile.json`)."""
        return {"traffic": True, **asdict(self)}


ProfileResult = MeasuredBatches | FittedPrior | SweepRecords | TrafficRecords


def _result_of(summary: dict[str, Any]) -> ProfileResult:
    """The typed result of a summary's fields (each type's own fields tell it apart)."""
    kind = (MeasuredBatches if "fit" in summary else FittedPrior if "prior" in summary
            else TrafficRecords if summary.get("traffic") else SweepRecords)
    names = {f.name for f in fields(kind)}
    return kind(**{k: v for k, v in summary.items() if k in names})


@dataclass(frozen=True)
class TierProfile:
    """One tier's profile: which tier, by which kind, under which settings key, and what it measured."""

    tier: str
    kind: str
    profile_key: str
    result: ProfileResult

    def to_json(self) -> dict[str, Any]:
        return {"tier": self.tier, "kind": self.kind, "profile_key": self.profile_key, **self.result.to_json()}

    @classmethod
    def from_json(cls, summary: dict[str, Any]) -> TierProfile:
        """From `to_json()`'s form (or the `tier_profiles` asset's output, which adds the folder)."""
        return cls(summary["tier"], summary["kind"], summary["profile_key"], _result_of(summary))

    def write(self, folder: Path) -> None:
        (folder / "profile.json").write_text(json.dumps(self.to_json(), indent=2))

    @classmethod
    def read(cls, folder: Path) -> TierProfile:
        return cls.from_json(json.loads((folder / "profile.json").read_text()))
