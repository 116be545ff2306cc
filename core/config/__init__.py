"""The fleet configuration, split by stage; import any setting from here.

Modules: `base` (strictness, errors, path types), `models`, `tiers`, `datasets`, `generation`,
`scoring`, `training`, and `fleet` (the whole `FleetConfig` and `load_fleet`).
"""

from routeforge.core.config.base import (  # noqa: F401
    CONFIG_DIR,
    ConfigError,
    ConfigPath,
    ModelRef,
    StoreUri,
    StrictSettings,
    _Strict,
    resolve_relative,
)
from routeforge.core.config.datasets import (  # noqa: F401
    BuiltinDataset,
    Dataset,
    FileDataset,
    HFDataset,
    PromptSettings,
    RouteLLMDataset,
    RouterBenchDataset,
    ScoreTableDataset,
    SplitSettings,
    Templates,
    TrafficLogDataset,
)
from routeforge.core.config.fleet import FleetConfig, RegistrySettings, ReleaseSettings, load_fleet  # noqa: F401
from routeforge.core.config.generation import GenerationSettings, ResponseFilters  # noqa: F401
from routeforge.core.config.models import (  # noqa: F401
    HubSource,
    ModelSource,
    ModelSpec,
    OpenAISource,
    Price,
    RandomInitSource,
    Sampling,
    SamplingOverrides,
    TableSource,
    VllmOptions,
)
from routeforge.core.config.scoring import (  # noqa: F401
    JUDGE_RUBRIC,
    CodeExecSettings,
    JudgeSettings,
    Metric,
    ScoringSettings,
)
from routeforge.core.config.tiers import BatchGrid, Hardware, ProfilingSettings, SweepSettings, Tier, TierProfile  # noqa: F401
from routeforge.core.config.training import (  # noqa: F401
    KnnSettings,
    LengthPredictorSettings,
    RouterSelectionSettings,
    RoutingEvaluationSettings,
    ScorePredictorSettings,
    TaskClassifierSettings,
    TextPredictorSettings,
    TrainingSettings,
)
