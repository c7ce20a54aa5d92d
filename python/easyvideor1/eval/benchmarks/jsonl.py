"""Any data file in the project's training format (docs/data-format.md), scored by the rewards.

``--benchmarks jsonl=PATH`` with PATH a ``.jsonl``/``.json`` file or a folder of them. Rows
are checked as ``evr1 data validate`` checks them (schema, problem type, ground truth); a bad
row leaves the benchmark out with one line naming its file, line and field. Every row is scored by the reward of its ``problem_type``, exactly
as in training; grounding and tracking types report IoU, regression MRA, open-ended text
similarity (or the judge), all others accuracy, each kind separately. The prompt keeps the
row's own ``<video>``/``<image>`` placement. A prepared manifest (``evr1 data prepare``) is a
data file too: its frames are read from the store by key, so the raw media may be gone.
PATH may be an ``s3://bucket/key`` object or an ``s3://bucket/prefix/`` of them.
"""

from __future__ import annotations

import posixpath
from pathlib import Path

from easyvideor1.cache.media_source import is_remote
from easyvideor1.data import Sample, load_samples_report
from easyvideor1.data.prepared import PREPARED_FIELD
from easyvideor1.eval.benchmarks.base import Benchmark, letter_options, register
from easyvideor1.eval.benchmarks.official import ProjectScoring
from easyvideor1.eval.types import AnnotationError, EvalItem
from easyvideor1.rewards import UnknownProblemType, canonical_problem_type
from easyvideor1.rewards.gt_check import sample_check


def item_from_sample(bench: str, sample: Sample, categories: dict) -> EvalItem:
    where = sample.source or sample.problem_id
    try:
        problem_type = canonical_problem_type(sample.problem_type)
    except UnknownProblemType as exc:
        raise AnnotationError(where, None, "problem_type", str(exc)) from None
    options = letter_options(list(sample.options), Path(where), "", "options") if sample.options else None
    meta = {"has_placeholders": True}
    if PREPARED_FIELD in sample.extra:  # frames load by key (the pipeline picks the engine's family)
        meta[PREPARED_FIELD] = sample.extra[PREPARED_FIELD]
    if problem_type == "open-ended":
        meta["open"] = "generation"
    return EvalItem(benchmark=bench, id=sample.problem_id, question=sample.problem, answer=sample.answer,
                    problem_type=problem_type, videos=sample.videos, images=sample.images, options=options,
                    categories=categories, meta=meta, source=where)


def checked_samples(path: Path | str) -> list[Sample]:
    """The rows of ``path`` (media not checked: a prepared row's frames are in the store); the
    first bad row, in one line, when there is any."""
    samples, problems = load_samples_report(path, check_ground_truth=sample_check)
    if problems:
        first = problems[0]
        more = f" (and {len(problems) - 1} more: evr1 data validate {path})" if len(problems) > 1 else ""
        raise AnnotationError(first.path, first.line, first.field, first.message + more)
    return samples


def data_files(root: Path | str) -> list[Path | str]:
    """The data files of ``root``: itself when a file, else the .json/.jsonl files in it. An
    ``s3://`` URL is an object, or a key prefix whose objects are listed the same way."""
    if isinstance(root, str) and is_remote(root):
        return _bucket_files(root)
    root = Path(root)
    if root.is_file():
        return [root]
    files = _without_reports(sorted(p for p in root.glob("*.json*")
                                    if p.suffix in (".json", ".jsonl") and p.is_file()))
    if not files:
        raise AnnotationError(str(root), None, None, "no .jsonl or .json data files")
    return files


def _bucket_files(url: str) -> list[Path | str]:
    from easyvideor1.data import remote

    try:
        if not url.endswith("/") and remote.stat(url) is not None:
            return [url]
        files = _without_reports(remote.list_data_files(url))
    except remote.RemoteFileError as exc:
        raise AnnotationError(url, None, None, exc.reason) from None
    if not files:
        raise AnnotationError(url, None, None, "no .jsonl or .json data files (neither an object nor a prefix "
                                               "holding them)")
    return files


def _without_reports(files: list) -> list:
    """Leave out ``X.report.jsonl`` next to a manifest ``X.jsonl`` (what `evr1 data prepare`
    writes beside it): a list of left-out rows, not data."""
    names = {_file_name(f) for f in files}
    return [f for f in files if not (_file_name(f).endswith(".report.jsonl")
                                     and _file_name(f)[: -len(".report.jsonl")] + ".jsonl" in names)]


def _file_name(path: Path | str) -> str:
    return posixpath.basename(path) if isinstance(path, str) else path.name


@register
class JSONLBenchmark(ProjectScoring, Benchmark):
    name = "jsonl"
    title = "Training-format JSONL"
    category_fields = ("problem_type", "file", "data_type")
    annotation = "a .jsonl/.json file (or folder of them) in the training data format"

    def load(self, root: Path | str) -> list[EvalItem]:
        items = []
        for path in data_files(root):
            for sample in checked_samples(path):
                items.append(item_from_sample(self.name, sample, {
                    "problem_type": canonical_problem_type(sample.problem_type), "file": _file_name(path),
                    "data_type": sample.data_type}))
        return items
