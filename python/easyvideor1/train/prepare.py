"""``evr1 data prepare``: decode every medium once into the frame store, write a prepared manifest.

After this job nothing downstream needs the raw media: rollout pods, trainer ranks and
evaluation read frames by cache key from the store and filter over-long prompts by the
token counts the manifest records (data/prepared.py). Steps, per batch of media (so that
fetched copies of remote media never fill the disk):

1. make every medium local: a path is used as it is; an ``s3://`` object is streamed to a
   temporary file (cache/media_source.py), unless the previous manifest recorded its ETag
   and size, they are unchanged, and its keys are stored (then nothing is fetched);
2. per model family, build the cache with the offline builder (cache/builder.py
   ``build_cache``: content-addressed, keys already stored are reused, a killed decoder is a
   reported failure), then record each medium's key and its metadata as stored in the blob;
3. delete the temporary copies.

Roots: the data file and ``data.media_root`` come from the command line and are trusted;
the media its rows name are not (a data set may come from anyone). With ``data.media_roots``
or ``data.media_buckets`` set, a local medium is decoded only when its resolved path
(symlinks and ``..`` followed) lies under one of the roots, and an ``s3://`` medium is
fetched only from one of the buckets (``name`` or ``s3://name/prefix``); any other is left
out with a reported failure (``error_kind`` "outside data roots"), whether or not it exists.
With both empty (the default) every medium the rows name is used, as before.

Then each sample's prompt is rendered as the trainer renders it and built with every
family's ``PromptBuilder`` to count its tokens. A sample with a failed medium (or prompt) is
left out and listed, with its data row's file:line, in ``<manifest stem>.report.jsonl``.

``out_path`` may be an ``s3://bucket/key`` URL (a cluster has no file system shared by this
job and the trainer): the manifest and report are written to a temporary folder and uploaded
next to each other, the report first, so the manifest's arrival marks a finished run; the
previous manifest at that URL is what an incremental re-run trusts ETags from.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import posixpath
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from easyvideor1.cache.blob import blob_metadata
from easyvideor1.cache.builder import build_cache
from easyvideor1.cache.key import content_hash, make_key
from easyvideor1.cache.loader import index_for_store
from easyvideor1.cache.media_source import MediaSource, RemoteObject, is_remote
from easyvideor1.cache.stores.base import open_store
from easyvideor1.config.schema import RunConfig
from easyvideor1.console import Progress
from easyvideor1.data.loader import load_samples_report
from easyvideor1.data.prepared import (
    PREPARED_VERSION,
    PreparedFamily,
    PreparedInfo,
    PreparedMedium,
    PreparedSample,
    SourceInfo,
    load_prepared_report,
    plain_sample,
    write_prepared,
)
from easyvideor1.data.schema import Sample, is_url, resolve_roots, within_roots
from easyvideor1.errors import CacheError, ConfigError, EasyVideoR1Error, MediaError
from easyvideor1.files import atomic_write
from easyvideor1.logging import event, get_logger
from easyvideor1.models.paths import check_model_dir
from easyvideor1.rewards.gt_check import run_sample_check
from easyvideor1.video.metadata import ImageMetadata, ImageParams, VideoMetadata, VideoParams

_log = get_logger("train.prepare")
DEFAULT_MEDIA_PER_BATCH = 256


@dataclass
class PrepareFailure:
    """Why rows were left out. ``stage``: row (invalid data row), fetch, media (hash/decode), prompt."""

    stage: str
    rows: list[str]
    problem_ids: list[str]
    medium: str | None
    kind: str | None
    families: list[str]
    error_kind: str
    error_class: str
    reason: str

    def report_lines(self) -> list[dict[str, Any]]:
        """One report line per data row (``row`` is its file:line)."""
        common = {k: v for k, v in dataclasses.asdict(self).items() if k not in ("rows", "problem_ids")}
        ids = self.problem_ids or [None] * len(self.rows)
        return [{"row": row, "problem_id": pid, **common} for row, pid in zip(self.rows, ids)]


@dataclass
class FamilyCounts:
    model: str = ""
    built: int = 0
    reused: int = 0
    failed: int = 0
    bytes_written: int = 0
    over_length: int = 0  # kept: the consumer filters by its own data.max_prompt_length
    max_prompt_tokens: int = 0


@dataclass
class PrepareSummary:
    manifest: str = ""
    report: str = ""
    store: str = ""
    rows: int = 0  # valid data rows
    bad_rows: int = 0
    written: int = 0
    left_out: int = 0  # valid rows left out for a failed medium or prompt
    media: int = 0  # distinct (kind, path or URL)
    fetched: int = 0
    fetched_bytes: int = 0
    fetch_skipped: int = 0  # s3:// media unchanged since the last run, keys stored: not fetched
    families: dict[str, FamilyCounts] = field(default_factory=dict)
    failures: list[PrepareFailure] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["seconds"] = round(self.seconds, 3)
        return out

    def format(self, max_failures: int = 50) -> str:
        lines = [f"manifest: {self.manifest} ({self.written} samples; frames in {self.store})",
                 f"rows: {self.rows} valid, {self.bad_rows} invalid, {self.left_out} left out for failed media "
                 "or prompts",
                 f"media: {self.media} distinct, {self.fetched} fetched from S3 ({self.fetched_bytes / 2**20:.1f} "
                 f"MiB), {self.fetch_skipped} unchanged remote media not fetched"]
        for name, c in self.families.items():
            lines.append(f"  {name}: built {c.built}, reused {c.reused}, failed {c.failed}, "
                         f"{c.bytes_written / 2**20:.1f} MiB written; prompts up to {c.max_prompt_tokens} tokens, "
                         f"{c.over_length} over data.max_prompt_length (kept; consumers filter)")
        report_lines = [line for f in self.failures for line in f.report_lines()]
        for line in report_lines[:max_failures]:
            what = f"{line['kind']} {line['medium']}: " if line["medium"] else ""
            lines.append(f"  left out  {line['row']}  {what}{line['error_kind']}: "
                         f"{str(line['reason']).splitlines()[0] if line['reason'] else ''}")
        if len(report_lines) > max_failures:
            lines.append(f"  ... {len(report_lines) - max_failures} more in the report")
        lines.append(f"report: {self.report} ({len(report_lines)} line(s)); {self.seconds:.1f} s")
        return "\n".join(lines)


@dataclass
class _Target:
    """One model family to prepare for: its model's prompt builder and frame budgets."""

    name: str
    model_dir: str
    builder: Any  # models.inputs.PromptBuilder
    video_params: VideoParams
    image_params: ImageParams

    def params(self, kind: str) -> VideoParams | ImageParams:
        return self.video_params if kind == "video" else self.image_params


@dataclass
class _Medium:
    kind: str  # "video" or "image"
    source: str  # path or URL, as in the Sample
    rows: list[str] = field(default_factory=list)
    problem_ids: list[str] = field(default_factory=list)
    local: str | None = None  # the file to hash and decode (the source itself, or a fetched copy)
    fetched: bool = False
    digest: str | None = None  # blake3 of the content
    size: int = 0
    remote: RemoteObject | None = None
    info: SourceInfo | None = None
    keys: dict[str, str] = field(default_factory=dict)  # family -> cache key
    metadata: dict[str, dict[str, Any]] = field(default_factory=dict)  # family -> as stored in the blob
    failure: PrepareFailure | None = None

    def fail(self, stage: str, error_kind: str, error_class: str, reason: str, family: str | None = None) -> None:
        if self.failure is None:
            self.failure = PrepareFailure(stage, self.rows, self.problem_ids, self.source, self.kind, [],
                                          error_kind, error_class, reason)
        if family is not None and family not in self.failure.families:
            self.failure.families.append(family)

    def fail_exc(self, stage: str, exc: Exception, family: str | None = None) -> None:
        kind = exc.kind if isinstance(exc, MediaError) else "cache" if isinstance(exc, CacheError) else "io"
        reason = exc.reason if isinstance(exc, MediaError) else str(exc)
        self.fail(stage, kind, type(exc).__name__, reason, family)


@dataclass
class _Job:
    cfg: RunConfig
    store_url: str
    store: Any
    index: Any
    targets: list[_Target]
    source: MediaSource
    tmp: str
    workers: int
    timeout: float
    memo: dict[str, SourceInfo]
    summary: PrepareSummary
    roots: _Roots | None = None  # None: every medium the rows name is used


@dataclass
class _Roots:
    """``data.media_roots`` (resolved) and ``data.media_buckets`` as ``(bucket, key prefix)``."""

    folders: tuple[str, ...]
    buckets: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, cfg: RunConfig) -> _Roots | None:
        data = cfg.data
        if not data.media_roots and not data.media_buckets:
            return None
        buckets = []
        for entry in data.media_buckets:
            if is_remote(entry):
                from easyvideor1.data.remote import parse_prefix

                buckets.append(parse_prefix(entry))
            else:
                buckets.append((entry.strip("/"), ""))
        return cls(resolve_roots(data.media_roots), tuple(buckets))

    def local(self, path: str) -> str | None:
        """The resolved path to read, or None when it lies outside every root."""
        return within_roots(path, self.folders)

    def allows_url(self, url: str) -> bool:
        from easyvideor1.data.remote import RemoteFileError, split_url

        try:
            bucket, key = split_url(url)
        except RemoteFileError:
            return False
        if ".." in key.split("/"):
            return False  # a store that normalises keys would climb out of a prefix
        return any(bucket == b and (not prefix or key.startswith(prefix.rstrip("/") + "/"))
                   for b, prefix in self.buckets)

    def refusal(self, source: str) -> str:
        if is_remote(source):
            allowed = ", ".join(f"s3://{b}/{p}".rstrip("/") for b, p in self.buckets) or "none"
            return (f"{source} is not in data.media_buckets ({allowed}): evr1 data prepare fetches s3:// media "
                    "only from the configured buckets")
        return (f"{source} is outside data.media_roots ({', '.join(self.folders) or 'none'}): evr1 data "
                "prepare decodes local media only under the configured roots, after resolving symlinks "
                "and '..'")


def prepare(data_path: str | os.PathLike, cfg: RunConfig, model_dirs: Sequence[str | os.PathLike],
            out_path: str | os.PathLike, *, progress: bool = True,
            media_per_batch: int = DEFAULT_MEDIA_PER_BATCH, trust_etag: bool = True,
            tmp_dir: str | os.PathLike | None = None) -> PrepareSummary:
    """Prepare ``data_path`` for the models in ``model_dirs`` into ``cfg.data.frame_cache.store``.

    Frame budgets, workers, decode timeout, media root and prompt templates come from
    ``cfg.data``. Writes the manifest to ``out_path`` (a path or an ``s3://`` object URL) and
    the report next to it; returns the summary. Raises ConfigError for unusable arguments
    and StoreError when the store (or the bucket of an ``s3://`` out) fails.
    """
    for model_dir in model_dirs:  # before the bucket is asked or anything decodes
        check_model_dir(model_dir, "--model")
    if is_remote(str(out_path)):
        return _prepare_to_bucket(data_path, cfg, model_dirs, str(out_path), progress=progress,
                                  media_per_batch=media_per_batch, trust_etag=trust_etag, tmp_dir=tmp_dir)
    return _prepare(data_path, cfg, model_dirs, Path(out_path), progress=progress,
                    media_per_batch=media_per_batch, trust_etag=trust_etag, tmp_dir=tmp_dir)


def _prepare_to_bucket(data_path: str | os.PathLike, cfg: RunConfig, model_dirs: Sequence[str | os.PathLike],
                       out_url: str, *, progress: bool, media_per_batch: int, trust_etag: bool,
                       tmp_dir: str | os.PathLike | None) -> PrepareSummary:
    """Prepare into a temporary folder, then upload the report and the manifest."""
    from easyvideor1.data import remote

    bucket, key = remote.split_url(out_url)
    folder, name = posixpath.split(key)
    stem = Path(name).stem
    report_url = remote.object_url(bucket, posixpath.join(folder, f"{stem}.report.jsonl"))
    # Checked before hours of decoding: credentials, endpoint and permissions. A missing
    # bucket is fine (the upload creates it, as the frame store does); a missing object is
    # a first run.
    with contextlib.suppress(remote.MissingBucketError):
        remote.stat(out_url)
    with tempfile.TemporaryDirectory(prefix="evr1-prepare-out-", dir=tmp_dir) as local_dir:
        local = Path(local_dir) / name
        summary = _prepare(data_path, cfg, model_dirs, local, progress=progress, media_per_batch=media_per_batch,
                           trust_etag=trust_etag, tmp_dir=tmp_dir, previous=out_url)
        started = time.perf_counter()
        remote.upload(local.with_name(f"{stem}.report.jsonl"), report_url)
        remote.upload(local, out_url)
    summary.manifest, summary.report = out_url, report_url
    summary.seconds += time.perf_counter() - started
    event(_log, "data_prepare_uploaded", manifest=out_url, report=report_url, written=summary.written)
    return summary


def _prepare(data_path: str | os.PathLike, cfg: RunConfig, model_dirs: Sequence[str | os.PathLike], out: Path, *,
             progress: bool, media_per_batch: int, trust_etag: bool, tmp_dir: str | os.PathLike | None,
             previous: str | Path | None = None) -> PrepareSummary:
    """``prepare`` into the local ``out``; ``previous``: the manifest to trust ETags from
    (default ``out``)."""
    started = time.perf_counter()
    store_url = cfg.data.frame_cache.store
    if not store_url:
        raise ConfigError("evr1 data prepare needs a frame store: --store URL (data.frame_cache.store): "
                          "/abs/dir, file:///abs/dir or s3://bucket/prefix")
    if media_per_batch < 1:
        raise ConfigError("media_per_batch must be >= 1")
    report = out.with_name(f"{out.stem}.report.jsonl")
    summary = PrepareSummary(manifest=str(out), report=str(report), store=store_url)
    targets = _targets(cfg, model_dirs)
    summary.families = {t.name: FamilyCounts(model=t.model_dir) for t in targets}

    # The rows as `evr1 data validate` checks them (rewards/gt_check.py): a row whose problem type
    # no scorer knows is left out and reported like any bad row.
    samples, problems = load_samples_report(data_path, media_root=cfg.data.media_root,
                                            check_ground_truth=run_sample_check(cfg.worker.reward))
    samples = [plain_sample(s) for s in samples]  # a manifest given as input is prepared afresh
    summary.rows, summary.bad_rows = len(samples), len(problems)
    summary.failures = [PrepareFailure("row", [f"{p.path}:{p.line}"], [], None, None, [], "bad row", "RowProblem",
                                       p.describe()) for p in problems]
    media = _collect(samples)
    summary.media = len(media)
    memo = _remote_memo(out if previous is None else previous) if trust_etag else {}

    with open_store(store_url) as store, MediaSource() as source, \
            tempfile.TemporaryDirectory(prefix="evr1-prepare-", dir=tmp_dir) as tmp:
        job = _Job(cfg, store_url, store, index_for_store(store), targets, source, tmp,
                   cfg.data.frame_cache.workers, cfg.data.frame_cache.decode_timeout_s, memo, summary,
                   _Roots.of(cfg))
        items = list(media.values())
        failed = 0
        with Progress("prepare media", total=len(items), unit="file", enabled=progress) as bar:
            for begin in range(0, len(items), media_per_batch):
                batch = items[begin:begin + media_per_batch]
                _prepare_batch(batch, job)
                failed += sum(1 for m in batch if m.failure is not None)
                bar.update(len(batch), failed=failed)
        for m in items:
            if m.failure is not None:
                summary.failures.append(m.failure)
        prepared = _prepare_samples(samples, media, job, progress)

    write_prepared(out, prepared)
    summary.written = len(prepared)
    summary.left_out = summary.rows - summary.written
    _write_report(report, summary)
    summary.seconds = time.perf_counter() - started
    event(_log, "data_prepare_done", manifest=str(out), written=summary.written, left_out=summary.left_out,
          bad_rows=summary.bad_rows, media=summary.media, fetched=summary.fetched,
          built={n: c.built for n, c in summary.families.items()}, seconds=round(summary.seconds, 2))
    return summary


def count_prompt_tokens(builder: Any, prompt: str, videos: Sequence[PreparedMedium],
                        images: Sequence[PreparedMedium], *, sample_id: str) -> int:
    """The prompt's length in tokens (vision included) for ``builder``'s model: the one place
    the count is made. ``PromptBuilder.expand`` needs only the media metadata (no frame is
    read) and gives the ids ``PromptBuilder.build`` gives on the frames."""
    inputs = builder.expand(prompt, [m.metadata for m in videos], [m.metadata for m in images], sample_id=sample_id)
    return len(inputs.prompt_ids)


def _targets(cfg: RunConfig, model_dirs: Sequence[str | os.PathLike]) -> list[_Target]:
    from easyvideor1.models.families import frame_params
    from easyvideor1.models.inputs import PromptBuilder

    if not model_dirs:
        raise ConfigError("evr1 data prepare needs at least one --model DIR (its family sets the frame sizes "
                          "and its processor counts the prompt tokens)")
    targets: dict[str, _Target] = {}
    for model_dir in model_dirs:
        builder = PromptBuilder.from_pretrained(str(model_dir))
        name = builder.family.name
        if name in targets:
            raise ConfigError(f"--model {model_dir} and --model {targets[name].model_dir} are both {name}: "
                              "give one model per family")
        video, image = frame_params(cfg, builder.family)
        targets[name] = _Target(name, str(model_dir), builder, video, image)
    return list(targets.values())


def _collect(samples: Sequence[Sample]) -> dict[tuple[str, str], _Medium]:
    media: dict[tuple[str, str], _Medium] = {}
    for sample in samples:
        for kind, paths in (("video", sample.videos), ("image", sample.images)):
            for path in paths:
                m = media.setdefault((kind, path), _Medium(kind, path))
                if not m.rows or m.rows[-1] != sample.source:  # a row naming one file twice: listed once
                    m.rows.append(sample.source)
                    m.problem_ids.append(sample.problem_id)
    return media


def _remote_memo(manifest: str | Path) -> dict[str, SourceInfo]:
    """``s3://`` URL -> what the previous manifest (a path or an ``s3://`` object) recorded
    (content hash, size, ETag)."""
    if not is_remote(str(manifest)) and not Path(manifest).is_file():
        return {}
    try:
        rows, _ = load_prepared_report(manifest)
    except (OSError, EasyVideoR1Error):
        return {}  # an unreadable old manifest only costs fetching again
    memo: dict[str, SourceInfo] = {}
    for row in rows:
        pairs = [*zip(row.sample.videos, row.prepared.video_sources), *zip(row.sample.images,
                                                                           row.prepared.image_sources)]
        for url, info in pairs:
            if is_remote(url) and info.etag:
                memo[url] = info
    return memo


def _prepare_batch(batch: list[_Medium], job: _Job) -> None:
    with ThreadPoolExecutor(max_workers=max(1, job.workers)) as pool:
        list(pool.map(lambda m: _materialize(m, job), batch))
    try:
        pending = [m for m in batch if m.failure is None and m.local is not None]
        for t in job.targets:
            _build_family(t, [m for m in pending if m.failure is None], job)
        for m in pending:
            if m.failure is None:
                _record_source(m, job)
        for m in batch:
            if m.failure is None:
                _read_metadata(m, job)
    finally:
        for m in batch:
            if m.fetched and m.local:
                Path(m.local).unlink(missing_ok=True)
                m.local = None


def _materialize(m: _Medium, job: _Job) -> None:
    """Give ``m`` a local file to build from, or keys already (an unchanged remote medium)."""
    if not is_remote(m.source):
        if is_url(m.source):
            m.fail("fetch", "missing file", "MediaMissingError", f"{m.source}: only s3:// media URLs can be "
                   "fetched; give a local path or an s3://bucket/key URL")
        elif job.roots is None:
            m.local = m.source
        else:
            m.local = job.roots.local(m.source)
            if m.local is None:
                m.fail("fetch", "outside data roots", "ConfigError", job.roots.refusal(m.source))
        return
    if job.roots is not None and not job.roots.allows_url(m.source):
        m.fail("fetch", "outside data roots", "ConfigError", job.roots.refusal(m.source))
        return
    try:
        m.remote = job.source.stat(m.source)
    except MediaError as exc:
        m.fail_exc("fetch", exc)
        return
    known = job.memo.get(m.source)
    if known is not None and known.etag == m.remote.etag and known.bytes == m.remote.size:
        keys = {t.name: make_key(known.content_hash, t.params(m.kind), m.source).key for t in job.targets}
        if all(job.store.exists(k) for k in keys.values()):
            m.keys, m.info = keys, known
            return
    try:
        m.local = str(job.source.fetch(m.source, job.tmp))
    except MediaError as exc:
        m.fail_exc("fetch", exc)
        return
    m.fetched = True


def _build_family(t: _Target, pending: list[_Medium], job: _Job) -> None:
    """Build ``pending`` for one family with the offline builder; failures go to their media."""
    counts = job.summary.families[t.name]
    if not pending:
        return
    build_list = Path(job.tmp) / f"build-{t.name}.jsonl"
    by_path: dict[str, _Medium] = {}
    with open(build_list, "w", encoding="utf-8") as handle:
        for i, m in enumerate(pending):
            path = os.path.normpath(os.path.abspath(m.local))
            by_path[path] = m
            handle.write(json.dumps({"problem_id": f"m{i}", "problem": "prepare", "answer": "-",
                                     "problem_type": "open-ended", f"{m.kind}s": [path]}) + "\n")
    built = build_cache(build_list, job.store_url, video_params=t.video_params, image_params=t.image_params,
                        workers=job.workers, timeout=job.timeout, progress=False)
    counts.built += built.built
    counts.reused += built.reused
    counts.bytes_written += built.bytes_written
    for failure in built.failed:
        m = by_path.get(os.path.normpath(failure.path))
        if m is not None and m.failure is None:
            m.fail("media", failure.error_kind, failure.error_class, failure.reason, t.name)
            counts.failed += 1
    for problem in built.bad_rows:  # the list is generated: a bad row here is a path the schema refuses
        if 1 <= problem.line <= len(pending) and pending[problem.line - 1].failure is None:
            pending[problem.line - 1].fail("media", "bad path", "RowProblem", problem.message, t.name)
            counts.failed += 1
    for m in pending:
        if m.failure is None:
            try:
                # Hashed once: the key of every family derives from the same content hash. A
                # file changed since is caught when its blob is not found (_read_metadata).
                if m.digest is None:
                    m.digest, m.size = content_hash(m.local, index=job.index), os.path.getsize(m.local)
            except (MediaError, OSError) as exc:
                m.fail_exc("media", exc, t.name)
                counts.failed += 1
                continue
            m.keys[t.name] = make_key(m.digest, t.params(m.kind), m.source).key


def _record_source(m: _Medium, job: _Job) -> None:
    assert m.digest is not None
    size = m.size
    m.info = SourceInfo(m.digest, size, m.remote.etag if m.remote is not None else None)
    if m.fetched:
        job.summary.fetched += 1
        job.summary.fetched_bytes += size


def _read_metadata(m: _Medium, job: _Job) -> None:
    """The metadata each family's blob stores (its header only, not the frames)."""
    skipped = not m.fetched and m.remote is not None
    for t in job.targets:
        key = m.keys.get(t.name)
        head = job.store.read_head(key) if key else None
        if head is None:
            m.fail("media", "cache", "CacheError", f"no blob under key {key} after the build: the file changed "
                   "while it was being prepared, or the store lost it; run prepare again", t.name)
            job.summary.families[t.name].failed += 1
            return
        try:
            m.metadata[t.name] = json.loads(blob_metadata(head, f"cache key {key}")["evr1.media"])
        except (CacheError, KeyError, ValueError) as exc:
            m.fail("media", "cache", type(exc).__name__, f"blob {key}: unreadable metadata ({exc})", t.name)
            job.summary.families[t.name].failed += 1
            return
        if skipped:
            job.summary.families[t.name].reused += 1
    if skipped:
        job.summary.fetch_skipped += 1


def _prepare_samples(samples: Sequence[Sample], media: dict[tuple[str, str], _Medium], job: _Job,
                     progress: bool) -> list[PreparedSample]:
    from easyvideor1.prompts.renderer import PromptRenderer
    from easyvideor1.rollout.stage import sample_fields

    renderer = PromptRenderer(job.cfg.data.prompt_template_dir)
    limit = job.cfg.data.max_prompt_length
    out: list[PreparedSample] = []
    for sample in Progress("count prompt tokens", total=len(samples), unit="sample", enabled=progress).each(samples):
        videos = [media[("video", p)] for p in sample.videos]
        images = [media[("image", p)] for p in sample.images]
        if any(m.failure is not None for m in (*videos, *images)):
            continue  # listed with the medium's failure
        families: dict[str, PreparedFamily] = {}
        current = [t.name for t in job.targets]  # the families a failure concerns
        try:
            text = renderer.render(sample_fields(sample))
            for t in job.targets:
                current = [t.name]
                pv = tuple(PreparedMedium(m.keys[t.name], VideoMetadata.from_dict(m.metadata[t.name])) for m in videos)
                pi = tuple(PreparedMedium(m.keys[t.name], ImageMetadata.from_dict(m.metadata[t.name])) for m in images)
                tokens = count_prompt_tokens(t.builder, text, pv, pi, sample_id=sample.problem_id)
                families[t.name] = PreparedFamily(t.name, t.video_params, t.image_params, pv, pi, tokens)
        except EasyVideoR1Error as exc:
            job.summary.failures.append(PrepareFailure(
                "prompt", [sample.source], [sample.problem_id], None, None, current, "prompt",
                type(exc).__name__, str(exc)))
            continue
        for name, fam in families.items():
            counts = job.summary.families[name]
            counts.max_prompt_tokens = max(counts.max_prompt_tokens, fam.prompt_tokens)
            counts.over_length += fam.prompt_tokens > limit
        info = PreparedInfo(PREPARED_VERSION, job.store_url, families,
                            tuple(m.info for m in videos), tuple(m.info for m in images), sample.source)
        out.append(PreparedSample(sample, info))
    return out


def _write_report(path: Path, summary: PrepareSummary) -> None:
    """JSONL, one line per left-out row and failure; written (empty) on a clean run too, so no
    stale report of an earlier run stays next to the new manifest."""
    with atomic_write(path) as handle:
        for failure in summary.failures:
            for line in failure.report_lines():
                handle.write(json.dumps(line, ensure_ascii=False) + "\n")


__all__ = ["DEFAULT_MEDIA_PER_BATCH", "FamilyCounts", "PrepareFailure", "PrepareSummary", "count_prompt_tokens",
           "prepare"]
