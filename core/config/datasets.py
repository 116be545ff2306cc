"""Prompt datasets (local files, Hugging Face, built-in readers, response tables), templates and the split."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal, NamedTuple

from pydantic import Field, field_validator, model_validator
from routeforge.core.config.base import ConfigPath, ModelRef, OneOf, StoreUri, _Strict
from routeforge.core.kinds import READERS
from routeforge.core.pretrained import ENCODER_PACKAGE_REF


class TaskSource(NamedTuple):
    """Where `config validate` learns a dataset's tasks before a run: tasks fixed by the fleet file, the
    column of its files that names each row's task (None: none to read), and whether the files can
    tell at all (False: only a run can, e.g. a hub dataset or a traffic log's metadata)."""

    fixed: frozenset[str] = frozenset()
    column: str | None = None
    knowable: bool = False


class _DatasetKind(_Strict):
    """What validation asks of every dataset kind, each answering for itself (no branch on its name):
    the local files it reads, whether its column fields map those files' columns, and its tasks."""

    # its *_field settings name columns of `local_files()` (a built-in reader maps its own)
    maps_columns: ClassVar[bool] = False

    def local_files(self) -> list[Path]:
        """The local files it reads that `config validate` can open (none: nothing to check before a run)."""
        return []

    def task_source(self) -> TaskSource:
        return TaskSource()


class _PromptFields(_DatasetKind):
    """Where a row's fields are; `meta_fields` are copied into `reference_meta` (choices, tests…)."""

    text_field: str = "prompt"  # the column holding each row's prompt text
    reference_field: str | None = "reference"  # the column holding each row's reference answer (None: no references)
    task_field: str | None = "task"  # the column holding each row's task (unused where `task` is fixed)
    task: str | None = None  # a fixed task when the source has no task column
    id_field: str | None = None  # the column holding each row's id (None: the row's position)
    # columns copied into each prompt's reference metadata (choices, tests, …)
    meta_fields: list[str] = Field(default_factory=list)
    reference_required: bool | None = None  # None: as the scoring metric needs
    # seed 001's templates (appendix A.3): `translation` reads the language from meta field
    # `language`, `in_context_qna` the options from meta field `choices` (a list or {labels, texts}).
    task_template: Literal["sentiment", "entity_recognition", "in_context_qna", "translation", "qna"] | None = None
    template_seed: int = 0  # seed of the task templates' choices
    limit: int | None = Field(default=None, gt=0)  # read at most this many rows

    def task_source(self) -> TaskSource:
        if self.task:
            return TaskSource(frozenset({self.task}), None, True)
        return TaskSource(column=self.task_field, knowable=bool(self.local_files()))


class FileDataset(_PromptFields):
    """A local JSON-lines, CSV or Parquet file with field mapping."""

    kind: Literal["jsonl", "csv", "parquet"]
    name: str  # the dataset's name: the prompts' source, and what a model's table source names
    path: ConfigPath  # the JSON-lines, CSV or Parquet file (relative to the fleet file's folder)

    maps_columns: ClassVar[bool] = True

    def local_files(self) -> list[Path]:
        return [Path(self.path)]


class HFDataset(_PromptFields):
    """A dataset read through `datasets.load_dataset` (hub id, or a builder such as `json` with
    local `data_files`: the same code path either way)."""

    kind: Literal["hf"]
    name: str  # the dataset's name: the prompts' source, and what a model's table source names
    # a hub dataset id, or a local folder or builder name
    path: ModelRef  # a hub id or a local folder
    subset: str | None = None  # the dataset's configuration (subset) name, where it has several
    split: str = "test"  # the dataset split to read
    # files for a builder such as `json` or `parquet` (`datasets.load_dataset`'s data_files)
    data_files: dict[str, str] | str | None = None
    # the hub revision (a commit, tag or branch) to read; pin it for a rebuild that reads the same rows
    revision: str | None = None
    text_field: str = "question"  # the column holding each row's prompt text
    reference_field: str | None = "answer"  # the column holding each row's reference answer (None: no references)


class BuiltinDataset(_DatasetKind):
    """A known public prompt file turned into prompts with references and reference metadata.

    `path` is the file (for `tweeteval_sentiment`: the `*_text.txt` file, with `*_labels.txt` and
    the mapping beside it). `templates` applies seed 001's task templates (appendix A.3) where the
    reader has one, seeded by `seed` so a rebuild gives the same text.
    """

    kind: Literal["builtin"]
    name: str  # the dataset's name: the prompts' source, and what a model's table source names
    # which known public format the file is in (prompts/builtin_readers.py)
    reader: Annotated[str, OneOf(READERS)]
    path: ConfigPath  # the file in that format (for `tweeteval_sentiment` the `*_text.txt`, with its labels beside it)
    templates: bool = True  # apply seed 001's task template where the reader has one
    seed: int = 0  # seed of the task templates' choices, so a rebuild gives the same text
    reference_required: bool | None = None  # refuse rows without a reference (None: as the scoring metric needs)
    limit: int | None = Field(default=None, gt=0)

    def local_files(self) -> list[Path]:
        return [Path(self.path)]

    def task_source(self) -> TaskSource:
        column = READERS.entry(self.reader).metadata.get("task_column")  # a reader whose rows name their task
        return TaskSource(column=column, knowable=column is not None)


class RouterBenchDataset(_DatasetKind):
    """RouterBench-style wide CSVs: one row per prompt, per-model correctness, response and cost."""

    kind: Literal["routerbench"]
    name: str  # the dataset's name: the prompts' source, and what a model's table source names
    files: dict[Literal["train", "test"], list[ConfigPath]]  # RouterBench's tables, by split (`train`, `test`)
    limit: int | None = Field(default=None, gt=0)


class RouteLLMDataset(_DatasetKind):
    """RouteLLM response CSV: `prompt`, a True/False column per model and `<model>_response`."""

    kind: Literal["routellm"]
    name: str  # the dataset's name: the prompts' source, and what a model's table source names
    path: ConfigPath  # RouteLLM's response CSV
    task: str = "gsm8k"  # the task of every row
    limit: int | None = Field(default=None, gt=0)


class TaskLookup(_Strict):
    """Tasks for a score table whose rows name none, from files that do (LLMRouter publishes its
    dcrouter scores without task names and the same prompts with them in its query files): a row
    takes the task of the lookup row with exactly its prompt text. JSON, JSON-lines or Parquet."""

    files: list[ConfigPath] = Field(min_length=1)  # files whose rows name the task of each prompt text
    text_field: str = "query"  # the field holding the prompt text (matched exactly)
    task_field: str = "task_name"  # the field holding the task


class ScoreTableDataset(_DatasetKind):
    """Per-model quality scores without responses (LLMRouter's dcrouter files, RouterDC's format):
    JSON (a list of objects), JSON-lines or Parquet rows with a prompt text and a `{model: score}`
    mapping, scores in [0, 1]. Models read it with `engine: table_import` and
    `source: {kind: table, dataset: <name>}`; `scoring.metric: table_correctness` uses the scores."""

    kind: Literal["score_table"]
    name: str  # the dataset's name: the prompts' source, and what a model's table source names
    files: dict[Literal["train", "test"], list[ConfigPath]]  # the score files, by split (`train`, `test`)
    text_field: str = "question"  # the field holding each row's prompt text
    scores_field: str = "scores"  # the field holding each row's {model: score} mapping
    task_field: str | None = None  # e.g. a cluster id column; None: every row is task `task`
    task: str | None = None  # the task of rows without a task field (None: the dataset's name)
    # where rows carry no task (or task_field is None): their task by prompt text from other files;
    # a row's own task field wins, and a text the lookup lacks gets `task`
    task_lookup: TaskLookup | None = None
    # the task of each file's rows where rows carry none, by the file's name without its folder
    # (RouterDC publishes one file per task: {mmlu_train.json: mmlu, mmlu_test.json: mmlu, ...});
    # a row's own task field wins, then this, then task_lookup, then `task`
    file_tasks: dict[str, str] = Field(default_factory=dict, description=(
        "task of each file's rows where rows carry no task field, keyed by the file's name without its "
        "folder (one file per task, RouterDC's layout); a row's own task field wins"))
    # the models the table may score; a row naming another is quarantined (None: no check)
    models: list[str] | None = None
    limit: int | None = Field(default=None, gt=0)

    maps_columns: ClassVar[bool] = True

    def local_files(self) -> list[Path]:
        return [Path(p) for paths in self.files.values() for p in paths]

    def task_source(self) -> TaskSource:
        named = frozenset(self.file_tasks.values()) | {self.task or self.name}
        if self.task_lookup is not None:  # the lookup's tasks are read at run time
            return TaskSource(named, None, False)
        return TaskSource(named, self.task_field, True)

    @model_validator(mode="after")
    def _file_tasks_name_listed_files(self) -> ScoreTableDataset:
        names = [p.name for paths in self.files.values() for p in paths]
        unknown = sorted(set(self.file_tasks) - set(names))
        if unknown:
            raise ValueError(f"file_tasks names {unknown}, not among the file names of `files` {names}")
        shared = sorted({n for n in self.file_tasks if names.count(n) > 1})
        if shared:
            raise ValueError(f"file_tasks: {shared} names more than one file of `files` (the same name in "
                             "two folders); rename one, or give the rows a task field")
        return self


class TrafficLogDataset(_DatasetKind):
    """Production request logs (`prompts.traffic_logs`): OpenAI-format request/response JSON-lines,
    one file, or every *.jsonl / *.jsonl.gz under a folder or fsspec URI. Each request's prompt
    becomes a prompt; its task is the line's `metadata.task`, else `task`. Logs carry no reference
    answer: score them with a reference-free metric (`llm_judge`), or with `reference:
    logged_response` take the answer production gave as the reference (quality then means agreement
    with the model in service: a router learns where a cheaper model answers alike)."""

    kind: Literal["traffic_log"]
    name: str  # the dataset's name: the prompts' source, and what a model's table source names
    path: StoreUri  # a log file, or a folder or fsspec URI of `*.jsonl` / `*.jsonl.gz` files
    task: str = "traffic"  # the task of every logged prompt
    # `logged_response`: the logged answer is each prompt's reference; `none`: no reference
    reference: Literal["none", "logged_response"] = "none"
    reference_required: bool | None = None  # None: whether the task's scoring metric compares with one
    limit: int | None = Field(default=None, gt=0)


Dataset = Annotated[
    FileDataset | HFDataset | BuiltinDataset | RouterBenchDataset | RouteLLMDataset | ScoreTableDataset
    | TrafficLogDataset,
    Field(discriminator="kind"),
]


class Templates(_Strict):
    """How a raw prompt becomes the text sent to the models."""

    default: str = "{text}"  # the template of every task not in per_task; must contain {text}
    per_task: dict[str, str] = Field(default_factory=dict)  # a template per task, by task name (tasks of the data)
    hint: str = "This is a {task} task."  # the task hint's text; {task} is the prompt's task
    add_hint: bool = True  # prefix each prompt with `hint` (its task)

    @field_validator("default", "hint")
    @classmethod
    def _has_placeholder(cls, value: str, info) -> str:
        needed = "{text}" if info.field_name == "default" else "{task}"
        if needed not in value:
            raise ValueError(f"must contain {needed}")
        return value


class PromptSettings(_Strict):
    """Normalization and limits applied to every prompt; violations are quarantined, not dropped."""

    normalize: bool = True  # Unicode NFC, no NUL/control characters, trimmed, CRLF → LF
    # prompts longer than this many tokens are quarantined (None: no limit)
    max_prompt_tokens: int | None = Field(default=None, gt=0)
    # longer prompts are quarantined (a 2.4 MB "prompt" in a traffic log is an accident, not a prompt);
    # None lifts the limit
    max_prompt_chars: int | None = Field(default=100_000, gt=0)
    tokenizer: ModelRef = ENCODER_PACKAGE_REF  # counts prompt tokens for max_prompt_tokens


class SplitSettings(_Strict):
    mode: Literal["seeded", "source"] = "seeded"  # `source`: keep the split the dataset ships
    test_fraction: float = Field(default=0.25, gt=0, lt=1)  # share of prompts held out for testing (`seeded` mode)
    seed: int = 0  # seed of the `seeded` split
