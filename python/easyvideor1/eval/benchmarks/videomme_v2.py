"""Video-MME-v2: grouped 8-option multiple choice with the benchmark's non-linear group score.

Format and scoring follow the official scorer, MME-Benchmarks/Video-MME-v2
``evaluation/test_video_mme_v2.py`` (the same rules as lmms-eval's
``tasks/videomme_v2/utils.py``). Reads a JSON/JSONL export of the release's ``test.parquet``
(``pandas.read_parquet(p).to_json("test.jsonl", orient="records", lines=True)``): one row
per question with ``video_id``, ``question_id`` (``"001-1"`` .. ``"001-4"``), ``question``,
``options`` (one string ``"A. ...\\nB. ...\\n...H. ..."``; a list is accepted too),
``answer`` (a letter A-H), ``group_type`` (``relevance`` or ``logic``), ``group_structure``
(logic groups: ``"[1, 2, 3, 4]"``, ``"[1, [2, 3], 4]"`` or ``"[[1, 2], 3, 4]"``) and
``level``, ``second_head``, ``third_head`` (filled on the group's last question only; every
member gets the group's values). The four questions of a video form its group. Videos:
``data/<video_id>.mp4`` (lmms-eval's layout) or ``videos/<video_id>.mp4``.

Official score (``evaluate`` / ``get_final_rating``): the letter is read by
``extract_characters_regex_v2`` (answer phrases such as ``Final Answer:`` / ``Answer:``
deleted, then the first capital A-H anywhere); a response without one scores -1, which the
script then uses as a number: a relevance group sums its scores (a -1 takes one right answer
away; a negative sum scores 0) and a logic chain tests them for truth (a -1 continues the
chain as if right). ``total`` (the headline) is the mean group score; the levels, group types
and ``Simple accuracy`` (over the items with a letter) ride along. Groups are the script's
runs of four rows in file order; the release keeps a video's four questions together, so the
adapter's groups by ``video_id`` are the same. The strict metric is the rewards reader with
every item counted (``non_lin_score`` below).

Scores: per-question accuracy ("Avg Acc") and ``non_lin_score``, the mean over groups of
the official group score. A relevance group with k of 4 right scores (k/4)^2. A logic
group scores by its correct chain (questions in ``question_id`` order): ``[1, 2, 3, 4]``
counts the correct prefix m and scores (m/4)^2; ``[1, [2, 3], 4]`` maps m = 0..4 to 0,
1/12, 4/12, 7/12, 1 and counts q3 as the second link when q1 is right and q2 wrong;
``[[1, 2], 3, 4]`` maps m to 0, 1/10, 2/10, 5/10, 1 and credits one link when only q2 of
the first pair is right. Per level, group type, second and third head the report gives
the accuracy and ``non_lin_score`` of those groups.
"""

from __future__ import annotations

import ast
import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from easyvideor1.eval.benchmarks.base import (
    Benchmark,
    OfficialVerdict,
    field,
    find_file,
    find_video,
    letter_options,
    read_records,
    register,
    split_embedded_options,
)
from easyvideor1.eval.benchmarks.extraction import VIDEOMME_V2_PREFIXES, first_letter_after_prefixes
from easyvideor1.eval.types import COMPOSITE, AnnotationError, EvalItem
from easyvideor1.video.metadata import VideoMetadata

GROUP_TYPES = ("relevance", "logic")
# Official score of m links of a logic chain, per group structure.
LOGIC_SCORES = {
    (1, 2, 3, 4): (0.0, 1 / 16, 4 / 16, 9 / 16, 1.0),
    (1, (2, 3), 4): (0.0, 1 / 12, 4 / 12, 7 / 12, 1.0),
    ((1, 2), 3, 4): (0.0, 1 / 10, 2 / 10, 5 / 10, 1.0),
}
GROUP_FIELDS = ("level", "second_head", "third_head")
ANNOTATIONS = ("test*.jsonl", "test*.json", "*/test*.jsonl", "*/test*.json")


def _as_tuple(value: Any) -> Any:
    return tuple(_as_tuple(v) for v in value) if isinstance(value, list | tuple) else value


def _as_list(value: Any) -> Any:
    return [_as_list(v) for v in value] if isinstance(value, list | tuple) else value


def parse_structure(value: Any, path: Path, where: str) -> tuple:
    """``"[1, [2, 3], 4]"`` (or the list itself) -> one of the official structures."""
    try:
        parsed = _as_tuple(ast.literal_eval(value) if isinstance(value, str) else value)
    except (ValueError, SyntaxError):
        parsed = None
    if parsed not in LOGIC_SCORES:
        known = ", ".join(json.dumps(_as_list(s)) for s in LOGIC_SCORES)
        raise AnnotationError(
            str(path), where, "group_structure", f"unknown logic group structure {value!r}; known: {known}"
        )
    return parsed


def group_score(correct: list[bool], group_type: str, structure: tuple | None = None) -> float:
    """The official score (0..1) of a group from its answers in question order."""
    if group_type == "relevance":
        return (sum(correct) / len(correct)) ** 2 if correct else 0.0
    chain = 0
    for ok in correct:
        if not ok:
            break
        chain += 1
    structure = structure or (1, 2, 3, 4)
    if structure == (1, (2, 3), 4) and chain == 1 and len(correct) > 2 and correct[2]:
        chain = 2  # q2 and q3 are parallel: q3 right completes the second link
    elif structure == ((1, 2), 3, 4) and chain == 0 and len(correct) > 1 and correct[1]:
        chain = 1  # q1 and q2 are parallel: q2 alone completes the first link
    return LOGIC_SCORES[structure][min(chain, 4)]


def _question_order(question_id: str) -> tuple:
    suffix = str(question_id).rsplit("-", 1)[-1]
    return (0, int(suffix)) if suffix.isdigit() else (1, str(question_id))


def _options(row: dict, path: Path, where: str) -> tuple[str, ...]:
    raw = field(row, "options", path, where, (str, list))
    if isinstance(raw, str):
        return split_embedded_options(raw, path, where, "options")[1]
    return letter_options(raw, path, where)


def _group_value(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)  # a parquet export writes an int column with nulls as floats
    return value


@register
class VideoMMEv2(Benchmark):
    name = "videomme_v2"
    protocol_version = 3  # official extraction and group rating (2026-12)
    title = "Video-MME-v2"
    category_fields = ("group_type", "level", "second_head", "third_head")
    video_defaults = {"fps": 1.0, "max_frames": 64}
    annotation = "test.json(l) (export of test.parquet); videos data/<video_id>.mp4"
    official_source = "MME-Benchmarks/Video-MME-v2 evaluation/test_video_mme_v2.py"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(root, ANNOTATIONS, "Video-MME-v2 annotation (JSON/JSONL export of test.parquet)")
        rows: dict[str, list[tuple[str, dict]]] = defaultdict(list)
        for where, row in read_records(path):
            video = str(
                field(row, ("video_id", "video"), path, where, (str, int))
            )  # lmms-eval; the script: video
            rows[video].append((where, row))
        items = []
        for video, members in rows.items():
            group = self._group(video, members, path)
            for where, row in members:
                options = _options(row, path, where)
                items.append(
                    self.choice_item(
                        field(row, "question_id", path, where, (str, int)),
                        field(row, "question", path, where),
                        options,
                        field(row, "answer", path, where),
                        (find_video(root, ("data", "videos", ""), video),),
                        {"group_type": group["group_type"], **{k: group[k] for k in GROUP_FIELDS}},
                        path=path,
                        where=where,
                        meta={"group": video, "structure": group["structure"]},
                    )
                )
        return items

    def _group(self, video: str, members: list[tuple[str, dict]], path: Path) -> dict[str, Any]:
        """The group's type, structure and level/heads (taken from whichever member has them)."""
        where, first = members[0]
        group_type = str(field(first, "group_type", path, where)).lower()
        if group_type not in GROUP_TYPES:
            raise AnnotationError(
                str(path), where, "group_type", f"expected relevance or logic, got {group_type!r}"
            )
        for spot, row in members[1:]:
            if str(field(row, "group_type", path, spot)).lower() != group_type:
                raise AnnotationError(
                    str(path), spot, "group_type", f"differs from {group_type!r} of video {video}'s group"
                )
        group: dict[str, Any] = {"group_type": group_type, "structure": None}
        if group_type == "logic":
            structure = next((r.get("group_structure") for _, r in members if r.get("group_structure")), None)
            if structure is None:
                raise AnnotationError(str(path), where, "group_structure", "missing for a logic group")
            group["structure"] = json.dumps(_as_list(parse_structure(structure, path, where)))
        for key in GROUP_FIELDS:
            group[key] = next((_group_value(r[key]) for _, r in members if r.get(key) is not None), None)
        return group

    def official_item(
        self, item: EvalItem, response: str, ctx: Any, metas: Sequence[VideoMetadata] = ()
    ) -> OfficialVerdict:
        letter = first_letter_after_prefixes(response, VIDEOMME_V2_PREFIXES, "ABCDEFGH")
        if not letter:
            return OfficialVerdict(
                values={"accuracy": 0.0, "score": -1.0},
                note="no capital A-H: the official score is -1 (left out of Simple accuracy, -1 in a "
                "relevance sum, right in a logic chain)",
            )
        score = float(letter == item.answer)
        return OfficialVerdict(values={"accuracy": score, "score": score}, extracted=letter)

    def official_summary(
        self, records: list[dict[str, Any]], summary: dict[str, Any]
    ) -> dict[str, Any] | None:
        verdicts = [r for r in records if isinstance(r.get("official"), dict)]
        groups: dict[str, list] = defaultdict(list)
        for record in verdicts:
            groups[record["meta"]["group"]].append(record)
        if not groups:
            return None
        parts: dict[str, list[float]] = defaultdict(list)
        for members in groups.values():
            members.sort(key=lambda r: _question_order(r["id"]))
            scores = [int(r["official"]["values"]["score"]) for r in members]
            meta, categories = members[-1]["meta"], members[-1]["categories"]
            structure = _as_tuple(json.loads(meta["structure"])) if meta.get("structure") else None
            value = official_group_score(scores, categories["group_type"], structure)
            parts["total"].append(value)
            parts[f"{categories['group_type']}_score"].append(value)
            if categories["group_type"] == "relevance":
                parts["relevance_linear_score"].append(sum(scores) / 4)
            if categories.get("level") is not None:
                parts[f"level_{int(categories['level'])}"].append(value)
        valid = [r["official"]["values"]["score"] for r in verdicts if r["official"]["values"]["score"] >= 0]
        over = {k: round(sum(v) / len(v), 6) for k, v in sorted(parts.items()) if k != "total"}
        if valid:
            over["simple_accuracy"] = round(sum(valid) / len(valid), 6)
        total = parts["total"]
        return {
            "metric": "total (mean group score)",
            "kind": COMPOSITE,
            "value": sum(total) / len(total),
            "n": len(verdicts),
            "groups": len(total),
            "over": over,
        }

    def extra_metrics(self, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
        groups: dict[str, list] = defaultdict(list)
        for record in records:
            groups[record["meta"]["group"]].append(record)
        scored = []  # (score, categories of the group)
        for members in groups.values():
            members.sort(key=lambda r: _question_order(r["id"]))
            meta = members[0]["meta"]
            structure = _as_tuple(json.loads(meta["structure"])) if meta.get("structure") else None
            correct = [r["values"].get("accuracy", 0.0) == 1.0 for r in members]
            categories = members[0]["categories"]
            scored.append((group_score(correct, categories["group_type"], structure), categories))
        if not scored:
            return
        summary["metrics"]["non_lin_score"] = _mean_entry([s for s, _ in scored], "groups")
        for name in self.category_fields:
            by_value: dict[str, list[float]] = defaultdict(list)
            for score, categories in scored:
                if categories.get(name) is not None:
                    by_value[str(categories[name])].append(score)
            for value, scores in by_value.items():
                target = summary["categories"].setdefault(name, {}).setdefault(value, {})
                target["non_lin_score"] = _mean_entry(scores, "groups")


def official_group_score(scores: list[int], group_type: str, structure: tuple | None) -> float:
    """``cal_relevance`` / ``cal_logic`` on the script's scores (1, 0, or -1 for no letter), 0..1."""
    table = LOGIC_SCORES[(1, 2, 3, 4)]
    if group_type == "relevance":
        count = sum(scores)
        return table[count] if 0 <= count <= 4 else 0.0
    last = -1
    for index, value in enumerate(scores):
        if not value:  # -1 is true: a missing letter continues the chain
            break
        last = index
    structure = structure or (1, 2, 3, 4)
    if structure == (1, (2, 3), 4) and last == 0 and len(scores) > 2 and scores[2]:
        last += 1
    elif structure == ((1, 2), 3, 4) and last == -1 and len(scores) > 1 and scores[1]:
        last += 1
    return LOGIC_SCORES[structure][last + 1]


def _mean_entry(scores: list[float], over: str) -> dict[str, Any]:
    return {"kind": COMPOSITE, "value": sum(scores) / len(scores), "n": len(scores), "over": over}
