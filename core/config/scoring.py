"""Quality scoring: the metric per task, the code sandbox and the LLM judge."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator
from routeforge.core.config.base import ConfigPath, ModelRef, OneOf, _Strict
from routeforge.core.config.models import ModelSpec
from routeforge.core.kinds import METRICS
from routeforge.core.pretrained import ENCODER_PACKAGE_REF

# a quality metric: a name registered in `core.kinds.METRICS` (one module each under scoring/metrics/)
Metric = Annotated[str, OneOf(METRICS)]


def metric_says(metric: str, what: str) -> bool:
    """What the metric's module registered of it (`needs_reference`, `runs_code`, `needs_judge`,
    `reads_table_labels`, `self_contained`; scoring/metrics/base.py)."""
    return bool(METRICS.entry(metric).metadata.get(what))


class CodeExecSettings(_Strict):
    """How generated code runs for pass@1 (scoring/metrics/code_exec.py). `isolation: required` (the
    default) runs it only inside bubblewrap: without it, the code-task cells are quarantined with the
    reason and the run goes on. `allow_fallback` opts in to the fallback (rlimits and an empty network
    namespace, as the same user), which is said at the start of scoring and recorded on the asset."""

    # `required`: refuse to run generated code without a sandbox (bubblewrap); `allow_fallback`: run it in a bare
    # subprocess where none is installed, with a warning
    isolation: Literal["required", "allow_fallback"] = "required"
    timeout_s: float = Field(default=10.0, gt=0)  # wall-clock limit of each test run, in seconds (a timeout scores 0)
    memory_mb: int = Field(default=1024, ge=64)  # address-space limit of each test run, in MiB
    workers: int | None = Field(default=None, gt=0)  # default: one per CPU


def code_isolation_warning(scoring) -> str | None:
    """One line when generated code will not run in bubblewrap (a fleet scoring pass@1 on a machine
    without it): said by `config validate` and at the start of every pipeline run."""
    import shutil

    running = sorted(m for m in scoring.metrics if metric_says(m, "runs_code"))
    if not running or shutil.which("bwrap") is not None:
        return None
    what = ("its code-task cells will be quarantined, not run" if scoring.code.isolation == "required"
            else "generated code will run OUTSIDE a sandbox (scoring.code.isolation: allow_fallback)")
    return (f"warning: scoring uses {', '.join(running)} and bubblewrap is not installed (Debian package "
            f"`bubblewrap`): {what}")


JUDGE_RUBRIC = (
    "You are grading how well an answer responds to a request, compared with the expected output.\n"
    "Judge correctness, completeness and helpfulness.\n\n"
    "Request:\n{prompt}\n\nExpected output:\n{reference}\n\nAnswer to grade:\n{response}\n\n"
    "Reply with one line 'Score: N' where N is an integer from 1 (useless) to 5 (as good as the "
    "expected output)."
)


class JudgeSettings(_Strict):
    """An LLM judge (G-Eval style, 002 §4.2) run through any generation engine; it must not be one of
    the candidate models. Scores on `scale` map linearly onto [0, 1]; 1..5 as in G-Eval keeps each
    score a single token, so its probability can weight the verdict when the engine returns them."""

    model: ModelSpec  # the judge model and its engine (a model spec like the fleet's; not one of the candidates)
    # the judge's instructions; must contain {prompt} and {response}, may contain {reference}
    rubric: str = JUDGE_RUBRIC
    max_tokens: int = Field(default=16, gt=0)  # tokens the judge may answer with (a score needs few)
    scale: tuple[int, int] = (1, 5)  # the judge's score range (low, high), mapped onto [0, 1]
    # what the judge's prompt says where a prompt has no reference
    no_reference: str = "(none given: judge the answer on its own merits)"

    @field_validator("rubric")
    @classmethod
    def _placeholders(cls, value: str) -> str:
        for name in ("{prompt}", "{response}"):
            if name not in value:
                raise ValueError(f"must contain {name}")
        return value


class ScoringSettings(_Strict):
    """`metric` scores every task not named in `per_task`. Every score lands in [0, 1]."""

    metric: Metric  # the metric that scores every task not named in per_task
    per_task: dict[str, Metric] = Field(default_factory=dict)  # a metric per task, by task name (tasks of the data)
    backbone: ModelRef = ENCODER_PACKAGE_REF  # BERTScore backbone; `roberta-large` where the hub is reachable
    num_layers: int | None = 6  # the backbone layer BERTScore reads the embeddings of
    batch_size: int = Field(default=16, gt=0)  # responses per BERTScore batch
    idf: bool = False  # BERTScore's inverse-document-frequency weighting
    # rescale BERTScore with its published baseline (needs the baseline file for the backbone)
    rescale_with_baseline: bool = False
    baseline_path: ConfigPath | None = None  # baseline file for backbones bert-score ships none for
    lang: str = "en"  # language of the responses (BERTScore's baseline choice)
    code: CodeExecSettings = CodeExecSettings()
    judge: JudgeSettings | None = None

    def metric_for(self, task: str) -> str:
        return self.per_task.get(task, self.metric)

    @property
    def metrics(self) -> set[str]:
        return {self.metric, *self.per_task.values()}
