"""Video-MMMU: knowledge acquisition from lecture videos (Perception, Comprehension, Adaptation).

Release: lmms-lab/VideoMMMU on the Hugging Face Hub, one config per track (``Perception``,
``Comprehension``, ``Adaptation``; a ``test`` parquet each, read here as JSON/JSONL exports
``<Track>.json(l)`` or ``<Track>/*.json(l)``) and the videos as one zip per discipline group
(``Art``, ``Business``, ``Science``, ``Medicine``, ``Humanities``, ``Engineering``), extracted
under the data folder: ``<Group>/<id>.mp4``, the group given by the subject in the id
(``videos/<Track>/<id>.mp4`` and ``videos/<id>.mp4`` are accepted too). Rows: ``id``
(``<split>_<Subject>_<n>``, the same id in each track: the item id is ``<Track>/<id>``),
``question``, ``options`` (a list, bare texts or ``"A. text"``), ``answer`` (a letter, or the
text of an open answer), ``question_type`` (``"multiple-choice"`` or ``"open"``),
``link_selected``; Adaptation rows also carry the quiz image, which the release's videos show
in their last frame (the official prompt says so), so it is not given separately.

Official scorer: EvolvingLMMs-Lab/VideoMMMU ``lmms_eval/tasks/videommmu/utils.py`` (the
benchmark's own copy; its helpers follow MMMU's ``eval_utils.py``). No judge is involved:
multiple-choice responses are read by ``extraction.videommmu_choice`` ("A." / "A:" forms,
then "(A)", then "A ", then option texts in responses of more than five words; the last
occurrence wins; nothing found reads "No Answere Found", wrong) and compared with the letter;
every other ``question_type`` (a missing one included) goes through MMMU's open reader
(``extraction.mmmu_open_predictions`` / ``mmmu_open_correct``: the tail after a key phrase,
numbers rounded to 2 places, the answer text inside a predicted text). An empty response is
the script's "API Error" and is left out of the denominator. The score is the
instance-level accuracy over the rest (per track, and over all tracks).

The project's strict metric reads multiple choice with the rewards library and sends open
answers to the LLM judge when one is configured (else an exact text or equal number). The
Δknowledge metric needs a run without the video and is not computed here (compare two runs).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from easyvideor1.eval.benchmarks.base import (
    Benchmark,
    OfficialVerdict,
    answer_letter,
    field,
    find_video,
    letter_options,
    read_records,
    register,
    require_answer,
)
from easyvideor1.eval.benchmarks.extraction import mmmu_open_correct, mmmu_open_predictions, videommmu_choice
from easyvideor1.eval.benchmarks.official_groups import mean_with_group_means
from easyvideor1.eval.types import AnnotationError, EvalItem

TRACKS = ("Perception", "Comprehension", "Adaptation")
_DISCIPLINE = re.compile(r"^[A-Za-z]+_(.+?)_\d+$")
# The official video folders: one per discipline group (get_cache_dir).
GROUP_OF = {
    **dict.fromkeys(("Art", "Art_Theory", "Design", "Music"), "Art"),
    **dict.fromkeys(("Biology", "Chemistry", "Geography", "Math", "Physics"), "Science"),
    **dict.fromkeys(("History", "Literature", "Sociology", "Psychology"), "Humanities"),
    **dict.fromkeys(
        (
            "Agriculture",
            "Architecture_and_Engineering",
            "Computer_Science",
            "Electronics",
            "Energy_and_Power",
            "Materials",
            "Mechanical_Engineering",
        ),
        "Engineering",
    ),
    **dict.fromkeys(
        (
            "Basic_Medical_Science",
            "Clinical_Medicine",
            "Diagnostics_and_Laboratory_Medicine",
            "Pharmacy",
            "Public_Health",
        ),
        "Medicine",
    ),
    **dict.fromkeys(("Accounting", "Economics", "Finance", "Manage", "Marketing"), "Business"),
}
EMPTY = 'empty response (the script\'s "API Error", filtered out)'


@register
class VideoMMMU(Benchmark):
    name = "videommmu"
    title = "Video-MMMU"
    category_fields = ("track", "discipline")
    video_defaults = {"fps": 1.0, "max_frames": 32}
    needs_judge = True  # the strict metric judges open answers; the official one does not
    annotation = "<Track>.json(l) per track (parquet exports); videos <Group>/<id>.mp4 (the discipline zips)"
    protocol_version = 3
    official_source = "EvolvingLMMs-Lab/VideoMMMU lmms_eval/tasks/videommmu/utils.py"

    def load(self, root: Path) -> list[EvalItem]:
        files = [
            (t, p)
            for t in TRACKS
            for p in (sorted(root.glob(f"{t}.json*")) + sorted(root.glob(f"{t}/*.json*")))
            if p.is_file()
        ]
        if not files:
            raise AnnotationError(
                str(root),
                None,
                None,
                "no Video-MMMU track files (Perception/Comprehension/Adaptation .json or .jsonl)",
            )
        items = []
        for track, path in files:
            for where, row in read_records(path):
                qid = str(field(row, "id", path, where, (str, int)))
                match = _DISCIPLINE.match(qid)
                subject = match.group(1) if match else None
                answer = require_answer(row, ("answer",), path, where)
                image = row.get("image") if isinstance(row.get("image"), str) else None
                folders = (GROUP_OF[subject],) if subject in GROUP_OF else ()
                raw_type = row.get("question_type")
                common = dict(
                    benchmark=self.name,
                    id=f"{track}/{qid}",
                    question=field(row, "question", path, where),
                    videos=(find_video(root, (*folders, f"videos/{track}", track, "videos"), qid),),
                    images=(str(path.parent / image),) if image else (),
                    categories={"track": track, "discipline": subject},
                    source=f"{path}:{where}",
                )
                options = row.get("options")
                meta = {
                    "question_type": raw_type if isinstance(raw_type, str) else "None",
                    "answer": answer if isinstance(answer, str | list) else str(answer),
                    "options": [str(o) for o in options] if isinstance(options, list) else [],
                }
                if options and str(raw_type or "multiple-choice").startswith("multiple"):
                    labelled = letter_options(options, path, where)
                    items.append(
                        EvalItem(
                            **common,
                            options=labelled,
                            problem_type="multiple choice",
                            answer=answer_letter(answer, labelled, path, where),
                            meta=meta,
                        )
                    )
                else:
                    items.append(EvalItem(**common, problem_type="open-ended", answer=str(answer), meta=meta))
        return items

    def official_item(
        self, item: EvalItem, response: str, ctx: Any, metas: Sequence[Any] = ()
    ) -> OfficialVerdict:
        question_type, gold = item.meta.get("question_type", "None"), item.meta.get("answer", item.answer)
        if question_type == "multiple-choice":
            letter = videommmu_choice(response, item.meta.get("options") or [o[3:] for o in item.options])
            if letter is None:
                return OfficialVerdict(excluded=EMPTY)
            golds = gold if isinstance(gold, list) else [gold]
            return OfficialVerdict(values={"accuracy": float(letter in golds)}, extracted=letter)
        predictions = mmmu_open_predictions(response)
        if predictions is None:
            return OfficialVerdict(excluded=EMPTY)
        if question_type == "perception":
            correct = False  # scored as multiple choice against the open reader's list: never equal
        else:
            correct = any(
                mmmu_open_correct(g, predictions) for g in (gold if isinstance(gold, list) else [gold])
            )
        return OfficialVerdict(
            values={"accuracy": float(correct)},
            extracted=[p for p in predictions if isinstance(p, str | int | float)],
            note="the official open-answer rule (answer text inside the response's key phrase) differs",
        )

    def official_summary(
        self, records: list[dict[str, Any]], summary: dict[str, Any]
    ) -> dict[str, Any] | None:
        return mean_with_group_means(records, "track", members=TRACKS)
