"""The prepared manifest: samples whose media are already in the frame store.

``evr1 data prepare`` (train/prepare.py) writes it; every consumer (trainer, rollout pool,
evaluation) reads it with :func:`load_prepared`. It is an ordinary data file (JSONL) whose
rows also carry a ``prepared`` object, so :func:`~easyvideor1.data.loader.load_samples`
reads it as plain samples too (``prepared`` then sits in ``Sample.extra``). That object
names, per model family, the cache key and the Video/ImageMetadata of each medium and the
prompt's token count, so frames load by key (``FrameLoader.load_video_key``) and over-long
prompts are filtered without touching a raw file or a pixel. Fields: docs/data-format.md.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from easyvideor1.data.loader import load_samples_report
from easyvideor1.data.schema import PREPARED_FIELD, Sample
from easyvideor1.errors import ConfigError, DataError, EasyVideoR1Error, RowProblem
from easyvideor1.files import atomic_write
from easyvideor1.video.metadata import ImageMetadata, ImageParams, VideoMetadata, VideoParams

PREPARED_VERSION = 1
_HEX = re.compile(r"^[0-9a-f]{16,128}$")


@dataclass(frozen=True)
class PreparedMedium:
    """One video or image of one family: where its frames are and what they are."""

    key: str
    metadata: VideoMetadata | ImageMetadata

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "metadata": self.metadata.as_dict()}


@dataclass(frozen=True)
class PreparedFamily:
    """A sample as one model family sees it (the cache key includes the family's resize factor)."""

    name: str
    video_params: VideoParams
    image_params: ImageParams
    videos: tuple[PreparedMedium, ...]
    images: tuple[PreparedMedium, ...]
    prompt_tokens: int  # the rendered prompt built for this family's model, vision tokens included

    def as_dict(self) -> dict[str, Any]:
        return {"video_params": _params_dict(self.video_params), "image_params": _params_dict(self.image_params),
                "videos": [m.as_dict() for m in self.videos], "images": [m.as_dict() for m in self.images],
                "prompt_tokens": self.prompt_tokens}

    def param_differences(self, video_params: VideoParams, image_params: ImageParams) -> list[str]:
        """How a run's frame budgets differ from the ones this sample was prepared with."""
        out = []
        for kind, mine, theirs in (("video", self.video_params, video_params),
                                   ("image", self.image_params, image_params)):
            a, b = mine.as_dict(), theirs.as_dict()
            out += [f"{kind}.{n}: prepared with {a.get(n)!r}, asked for {b.get(n)!r}"
                    for n in sorted(set(a) | set(b)) if a.get(n) != b.get(n)]
        return out


@dataclass(frozen=True)
class SourceInfo:
    """The raw file a medium was made from: its content hash (any family's key derives from it),
    size, and for ``s3://`` media the object's ETag (a re-run skips fetching an unchanged object)."""

    content_hash: str
    bytes: int
    etag: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"content_hash": self.content_hash, "bytes": self.bytes}
        if self.etag is not None:
            out["etag"] = self.etag
        return out


@dataclass(frozen=True)
class PreparedInfo:
    version: int
    store: str
    families: dict[str, PreparedFamily]
    video_sources: tuple[SourceInfo, ...] = ()
    image_sources: tuple[SourceInfo, ...] = ()
    origin: str = ""  # file:line of the data row it was prepared from

    def as_dict(self) -> dict[str, Any]:
        return {"version": self.version, "store": self.store, "origin": self.origin,
                "sources": {"videos": [s.as_dict() for s in self.video_sources],
                            "images": [s.as_dict() for s in self.image_sources]},
                "families": {name: fam.as_dict() for name, fam in self.families.items()}}


@dataclass(frozen=True)
class PreparedSample:
    """A data row (``sample``, without its ``prepared`` field) and what preparing it recorded."""

    sample: Sample
    prepared: PreparedInfo = field(repr=False)

    @property
    def problem_id(self) -> str:
        return self.sample.problem_id

    @property
    def source(self) -> str:
        return self.sample.source

    def family(self, name: str) -> PreparedFamily:
        key = _family_name(name)
        found = self.prepared.families.get(key)
        if found is None:
            raise ConfigError(f"sample {self.problem_id!r} ({self.source}) was prepared for "
                              f"{sorted(self.prepared.families)}, not {key!r}: run `evr1 data prepare` "
                              f"with a {key} model")
        return found

    def to_row(self, *, relative_to: str | os.PathLike | None = None) -> dict[str, Any]:
        row = self.sample.to_row(relative_to=relative_to)
        row[PREPARED_FIELD] = self.prepared.as_dict()
        return row


def plain_sample(sample: Sample) -> Sample:
    """``sample`` without a ``prepared`` field (a manifest given as input is prepared afresh)."""
    if PREPARED_FIELD not in sample.extra:
        return sample
    return replace(sample, extra={k: v for k, v in sample.extra.items() if k != PREPARED_FIELD})


def load_prepared(path: str | os.PathLike, *, strict: bool = True, family: str | None = None,
                  media_root: str | os.PathLike | None = None) -> list[PreparedSample]:
    """Every row of a prepared manifest. ``strict`` raises DataError listing every problem
    (file:line:field); ``family`` also requires each row to have been prepared for it."""
    samples, problems = load_prepared_report(path, family=family, media_root=media_root)
    if problems and strict:
        raise DataError(problems)
    return samples


def load_prepared_report(path: str | os.PathLike, *, family: str | None = None,
                         media_root: str | os.PathLike | None = None
                         ) -> tuple[list[PreparedSample], list[RowProblem]]:
    """Like :func:`load_prepared` but returns ``(good rows, problems)`` without raising."""
    samples, problems = load_samples_report(path, media_root=media_root)
    out: list[PreparedSample] = []
    for sample in samples:
        file, _, line = sample.source.rpartition(":")
        info, row_problems = parse_prepared(sample.extra.get(PREPARED_FIELD), n_videos=len(sample.videos),
                                            n_images=len(sample.images), path=file, line=int(line or 0))
        if info is not None and family is not None and _family_name(family) not in info.families:
            row_problems.append(RowProblem(file, int(line or 0), f"{PREPARED_FIELD}.families",
                                           f"not prepared for {_family_name(family)!r} "
                                           f"(has {sorted(info.families)})"))
        problems.extend(row_problems)
        if info is not None and not row_problems:
            out.append(PreparedSample(plain_sample(sample), info))
    problems.sort(key=lambda p: p.line)
    return out, problems


def prepared_row_check(key_exists: Callable[[str, str], bool]) -> Callable[[Sample], tuple[str, str] | None]:
    """The ``evr1 data validate`` check of a prepared row (rows without ``prepared`` pass): the
    object parses and every medium's key, of every family, is in the store
    (``key_exists(recorded store URL, key)``); a row read by key needs no raw media."""

    def check(sample: Sample) -> tuple[str, str] | None:
        raw = sample.extra.get(PREPARED_FIELD)
        if raw is None:
            return None
        file, _, line = sample.source.rpartition(":")
        info, problems = parse_prepared(raw, n_videos=len(sample.videos), n_images=len(sample.images),
                                        path=file, line=int(line) if line.isdigit() else 0)
        if problems:
            return problems[0].field or PREPARED_FIELD, problems[0].message
        for fam in info.families.values():
            for kind, media in (("videos", fam.videos), ("images", fam.images)):
                for i, medium in enumerate(media):
                    if not key_exists(info.store, medium.key):
                        return (f"{PREPARED_FIELD}.families.{fam.name}.{kind}[{i}].key",
                                f"{medium.key} is not in the frame store (run `evr1 data prepare` again, or "
                                "give the store the manifest's pods read with --store)")
        return None

    return check


def write_prepared(path: str | os.PathLike, samples: Iterable[PreparedSample]) -> Path:
    """JSONL, atomically; media inside the manifest's folder are written relative to it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = os.path.abspath(path.parent)
    with atomic_write(path) as handle:
        for sample in samples:
            handle.write(json.dumps(sample.to_row(relative_to=folder), ensure_ascii=False) + "\n")
    return path


def parse_prepared(value: Any, *, n_videos: int, n_images: int, path: str, line: int
                   ) -> tuple[PreparedInfo | None, list[RowProblem]]:
    """Validate one row's ``prepared`` object; every problem names its field."""
    problems: list[RowProblem] = []

    def bad(name: str, message: str) -> None:
        problems.append(RowProblem(path, line, f"{PREPARED_FIELD}{name}", message))

    if not isinstance(value, dict):
        bad("", f"expected the object `evr1 data prepare` writes, got {_kind(value)} (is this a prepared "
                "manifest?)")
        return None, problems
    version = value.get("version")
    if version != PREPARED_VERSION:
        newer = isinstance(version, int) and not isinstance(version, bool) and version > PREPARED_VERSION
        bad(".version", f"expected {PREPARED_VERSION}, got {version!r}"
                        + (" (written by a newer easyvideor1)" if newer else ""))
        return None, problems
    store = value.get("store")
    if not isinstance(store, str) or not store:
        bad(".store", f"expected the frame store URL, got {_kind(store)}")
    origin = value.get("origin", "")
    if not isinstance(origin, str):
        bad(".origin", f"expected the data row's file:line, got {_kind(origin)}")
    sources = value.get("sources") if isinstance(value.get("sources"), dict) else None
    if sources is None:
        bad(".sources", "expected an object with 'videos' and 'images' lists")
        sources = {}
    video_sources = _sources(sources.get("videos"), n_videos, ".sources.videos", bad)
    image_sources = _sources(sources.get("images"), n_images, ".sources.images", bad)
    families: dict[str, PreparedFamily] = {}
    raw_families = value.get("families")
    if not isinstance(raw_families, dict) or not raw_families:
        bad(".families", f"expected an object with one entry per model family, got {_kind(raw_families)}")
        raw_families = {}
    for name, entry in raw_families.items():
        fam = _family(str(name), entry, n_videos, n_images, f".families.{name}", bad)
        if fam is not None:
            families[fam.name] = fam
    if problems:
        return None, problems
    return PreparedInfo(version, store, families, video_sources, image_sources, origin), []


def _family(name: str, entry: Any, n_videos: int, n_images: int, where: str, bad: Any) -> PreparedFamily | None:
    if not isinstance(entry, dict):
        bad(where, f"expected an object, got {_kind(entry)}")
        return None
    ok = True
    params: dict[str, Any] = {}
    for field_name, cls in (("video_params", VideoParams), ("image_params", ImageParams)):
        try:
            given = entry[field_name]
            # Every field is recorded: a missing one must not silently take today's default.
            absent = sorted(set(cls().as_dict()) - set(given))
            if absent:
                raise ValueError(f"missing {absent}")
            params[field_name] = cls(**given)
        except (KeyError, TypeError, ValueError) as exc:
            bad(f"{where}.{field_name}", f"expected {cls.__name__} fields ({exc})")
            ok = False
    media: dict[str, tuple[PreparedMedium, ...]] = {}
    for kind, count, meta_cls in (("videos", n_videos, VideoMetadata), ("images", n_images, ImageMetadata)):
        items = entry.get(kind)
        if not isinstance(items, list) or len(items) != count:
            bad(f"{where}.{kind}", f"expected a list of {count} entries (one per item of the row's '{kind}'), "
                                   f"got {_kind(items)}{f' of {len(items)}' if isinstance(items, list) else ''}")
            ok = False
            continue
        parsed = []
        for i, item in enumerate(items):
            key = item.get("key") if isinstance(item, dict) else None
            if not isinstance(key, str) or not _HEX.match(key):
                bad(f"{where}.{kind}[{i}].key", f"expected a cache key (lowercase hex), got {_kind(key)}")
                ok = False
                continue
            try:
                parsed.append(PreparedMedium(key, meta_cls.from_dict(item["metadata"])))
            except (KeyError, TypeError, ValueError) as exc:
                bad(f"{where}.{kind}[{i}].metadata", f"expected {meta_cls.__name__} fields ({exc})")
                ok = False
        media[kind] = tuple(parsed)
    tokens = entry.get("prompt_tokens")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens <= 0:
        bad(f"{where}.prompt_tokens", f"expected a positive token count, got {_kind(tokens)}")
        ok = False
    if not ok:
        return None
    return PreparedFamily(_family_name(name), params["video_params"], params["image_params"], media["videos"],
                          media["images"], tokens)


def _sources(items: Any, count: int, where: str, bad: Any) -> tuple[SourceInfo, ...]:
    if not isinstance(items, list) or len(items) != count:
        bad(where, f"expected a list of {count} entries, got {_kind(items)}")
        return ()
    out = []
    for i, item in enumerate(items):
        item = item if isinstance(item, dict) else {}
        digest, size, etag = item.get("content_hash"), item.get("bytes"), item.get("etag")
        if not isinstance(digest, str) or not _HEX.match(digest):
            bad(f"{where}[{i}].content_hash", f"expected a blake3 hex digest, got {_kind(digest)}")
        elif isinstance(size, bool) or not isinstance(size, int) or size < 0:
            bad(f"{where}[{i}].bytes", f"expected a byte count, got {_kind(size)}")
        elif etag is not None and not isinstance(etag, str):
            bad(f"{where}[{i}].etag", f"expected a string, got {_kind(etag)}")
        else:
            out.append(SourceInfo(digest, size, etag))
    return tuple(out)


def _params_dict(params: VideoParams | ImageParams) -> dict[str, Any]:
    # Floats stay floats (fps 2.0), so the recorded dict is the one the cache key hashed.
    declared = {f.name: f.type for f in params.__dataclass_fields__.values()}
    return {k: float(v) if declared.get(k) in (float, "float") else v for k, v in params.as_dict().items()}


def _family_name(name: str) -> str:
    return str(name).strip().lower().replace("-", "_").replace(".", "_")


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    text = json.dumps(value, default=str)
    return f"{type(value).__name__} {text[:57] + '...' if len(text) > 60 else text}"


_PARSED: dict[int, tuple[Any, PreparedInfo | None]] = {}


def prepared_info(sample: Sample) -> PreparedInfo | None:
    """What preparing ``sample`` recorded (its ``prepared`` field), or None for a plain row.

    Parsed once per sample object (samples are immutable and live for the run); a malformed
    field is a DataError naming the row and the field."""
    value = sample.extra.get(PREPARED_FIELD)
    if value is None:
        return None
    cached = _PARSED.get(id(sample))
    if cached is not None and cached[0] is value:
        return cached[1]
    file, _, line = sample.source.rpartition(":")
    info, problems = parse_prepared(value, n_videos=len(sample.videos), n_images=len(sample.images),
                                    path=file or sample.source, line=int(line) if line.isdigit() else 0)
    if problems:
        raise DataError(problems)
    if len(_PARSED) > 1_000_000:  # a bound, far above any data set held at once
        _PARSED.clear()
    _PARSED[id(sample)] = (value, info)
    return info


def prepared_family(sample: Sample, family: str) -> PreparedFamily | None:
    """The ``family`` view of a prepared sample (None for a plain row); a sample prepared for
    other families only is a ConfigError naming them."""
    info = prepared_info(sample)
    if info is None:
        return None
    return PreparedSample(sample, info).family(family)


def is_prepared_manifest(path: str | os.PathLike) -> bool:
    """Whether the data file's first row carries a ``prepared`` field (its media are in a store)."""
    if str(path).startswith("s3://"):
        from easyvideor1.data.remote import read_bytes

        try:
            first = next((line for line in read_bytes(str(path)).splitlines() if line.strip()), b"")
            row = json.loads(first) if first else None
        except (EasyVideoR1Error, ValueError, RecursionError):
            return False  # the loader reports what is wrong with the file
        return isinstance(row, dict) and PREPARED_FIELD in row
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    row = json.loads(line)
                    return isinstance(row, dict) and PREPARED_FIELD in row
    except (OSError, ValueError, RecursionError):
        return False  # the loader reports what is wrong with the file
    return False


def family_keys(value: Any, family: str, *, n_videos: int, n_images: int, where: str
                ) -> tuple[list[str], list[str]] | None:
    """The cache keys a ``prepared`` object names for ``family`` (videos, images), or None when
    ``value`` is None; a malformed object or a missing family is a DataError/ConfigError."""
    if value is None:
        return None
    file, _, line = where.rpartition(":")
    info, problems = parse_prepared(value, n_videos=n_videos, n_images=n_images, path=file or where,
                                    line=int(line) if line.isdigit() else 0)
    if problems:
        raise DataError(problems)
    name = _family_name(family)
    found = info.families.get(name)
    if found is None:
        raise ConfigError(f"{where} was prepared for {sorted(info.families)}, not {name!r}: run "
                          f"`evr1 data prepare` with a {name} model")
    return [m.key for m in found.videos], [m.key for m in found.images]
