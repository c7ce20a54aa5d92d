"""TempCompass: temporal perception (action, speed, direction, attribute change, order).

Source: the benchmark's repository, llyx97/TempCompass: ``questions/*.json`` (the release,
also on the Hugging Face hub as ``lmms-eval/TempCompass``), the inference prompts of
``run_qwen2_vl.py`` and the scorers ``eval_multi-choice.py``, ``eval_yes_no.py``,
``eval_caption_matching.py``, ``eval_captioning.py`` with ``prompt_templates.py`` and
``utils/eval_utils.py`` (``llm_output_to_rating``, ``print_result``).

Release: ``questions/{multi-choice,yes_no,caption_matching,captioning}.json`` (whichever
exist), each ``{video_id: {dimension: [{"question", "answer"}, ...]}}``; videos
``videos/<video_id>.mp4`` (ids such as ``1034419625_reverse``). Multiple-choice questions
carry their options as ``A. ...`` lines and answer ``"B. text"``. Caption matching writes
its two options as ``Caption A:`` / ``Sentence A:`` / ``Option 1:`` lines (``Option 2:`` is
the second option, shown to the model as written) and answers with the whole line.
Yes/no answers are ``yes`` / ``no``. Captioning asks for a caption choosing among
``Information A: {...}`` lines; its answer (``"B. dunking a basketball"``) names that line.
The prompt is the release's question as written plus the official answer prompt
(``Please directly give the best option:`` / ``Please answer yes or no:``).

Official score, per task (a missing response is rated 0 as the scripts rate a ``None``
prediction):

* multi-choice: right when the response equals the answer line, or is a bare ``A``-``D``,
  or starts with ``A.``-``D.`` / ``A)``-``D)``, and that letter is the answer's; anything
  else (``(B)``, ``b``, ``The answer is B``) goes to the LLM judge;
* yes/no: the lower-cased response starting with ``yes`` / ``no`` (so ``not sure`` reads as
  no), else the judge;
* caption matching: the response equal to an option line, its sentence (also after ``) ``),
  or its label (``Option 1``, ``1``, ``Caption A``, ``A``; a ``.`` dropped) is read, else the
  judge; a bare ``A`` for an ``Option 1/2`` question is no label and goes to the judge;
* judge (these three): the official prompt (``... respond "Correct" ... "Incorrect"``) with the
  question, ground truth and prediction; ``Correct``/``Incorrect`` read as the scripts do.
  Without a judge the scripts' ``--disable_llm`` rule applies: no rule match rates 0;
* captioning: always judged: the judge answers the *first multi-choice question of the same
  video and dimension* (``questions/multi-choice.json``) from the caption; right when its
  ``Answer:`` line starts with the right letter and holds exactly one ``A.``-``D.``. An empty
  judge reply rates -1, as the script does. Without a judge: ``official: needs judge``.

The official numbers are per task file (``avg``: items pooled); the headline is their mean
over the task types present, each type's ``avg`` beside it. The strict metric is the rewards
reader on the letters (``Option 2`` / ``2`` read as ``B``); captioning's strict metric is the judge score (or ROUGE) against the
answer's text. Judge settings are the project's (temperature 0), not the scripts' (1.0).
Item ids: ``<task>/<video_id>/<dimension>/<index>`` (the release numbers questions per list).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from easyvideor1.eval.benchmarks.base import (
    LETTERS,
    Benchmark,
    OfficialVerdict,
    answer_letter,
    field,
    find_files,
    find_video,
    read_records,
    register,
    split_embedded_options,
)
from easyvideor1.eval.benchmarks.common import ScoringFailure, default_prompt, default_score, media_prefix
from easyvideor1.eval.benchmarks.official import grouped_official_mean
from easyvideor1.eval.types import AnnotationError, EvalItem, ItemScore
from easyvideor1.rewards.judge import JudgeConfig, JudgeUnavailable, chat
from easyvideor1.video.metadata import VideoMetadata

TASKS = {
    "multi-choice": "multiple choice",
    "yes_no": "boolean",
    "caption_matching": "multiple choice",
    "captioning": "open-ended",
}
ANSWER_PROMPTS = {
    "multi-choice": "\nPlease directly give the best option:",
    "yes_no": "\nPlease answer yes or no:",
    "caption_matching": "\nPlease directly give the best option:",
    "captioning": "",
}
_CAPTION = re.compile(r"^\s*(Caption|Sentence|Option)\s+([A-J]|[1-9])\s*:\s*(.*)$")

# The official judge prompts (prompt_templates.py), restated.
JUDGE_SYSTEM = "You are an AI assistant for question answering."
_RATING_PROMPT = (
    "\nYou will receive a {kind}, the ground-truth answer and the prediction from a question answering (QA) "
    "model. Your task is to determine whether QA model prediction is correct, based on the question and "
    'ground-truth answer. If the prediction is correct, respond "Correct". If the prediction is incorrect, '
    'respond "Incorrect".\n'
)
JUDGE_HEADERS = {
    "multi-choice": ("multi-choice question", "Multi-Choice Question"),
    "yes_no": ("Yes/No question", "Yes/No Question"),
    "caption_matching": ("caption matching question", "Caption Matching Question"),
}
CAPTION_PROMPT = (
    "\nYou will receive a video description and a multi-choice question. Your task is to choose the correct "
    "answer and briefly explain the reason why you choose the answer. If none of the choice candidates are "
    'correct or the video description lacks enough information to answer the question, just answer "None of '
    'the choices are correct". Please organize your response in this format:\n```\nReasoning: [Your reason to '
    "obtain the answer]\nAnswer: [Your answer]\n```\n\nHere are some examples of video description, "
    "multi-choice question and the expected answer:\n```\nVideo Description: A person is palying football.\n"
    "Multi-Choice Question:\nWhat is the person doing in the video?\nA. cooking\nB. palying football\nC. playing "
    "basketball\nD. reading book\nReasoning: The video description mentions that the person is playing football."
    "\nAnswer: B. palying football\n\nVideo Description: A bird is flying clockwise.\nMulti-Choice Question:\n"
    "In which direction is the bird flying?\nA. backwark\nB. counter-clockwise\nC. clockwise\nD. downward\n"
    "Reasoning: The video description mentions that the bird is flying clockwise\nAnswer: C. clockwise\n\n"
    "Video Description: An air balloon is inflating.\nMulti-Choice Question:\nWhat is happening to the air "
    "balloon?\nA. exploding\nB. getting smaller\nC. flying\nReasoning: The video description mentions that the "
    "air balloon is inflating, while none of the coices can be explained as inflating.\nAnswer: None of the "
    "choices are correct\n```\n"
)


def _caption_options(text: str, path: Path, where: str) -> tuple[str, tuple[str, ...], list[str]]:
    """(question, ("A. text", ...), the release's labels such as "Option 1")."""
    lines = text.split("\n")
    options, labels = [], []
    for line in lines[1:]:
        match = _CAPTION.match(line)
        if not match:
            raise AnnotationError(
                str(path),
                where,
                "question",
                f"expected 'Caption A: ...', 'Sentence A: ...' or 'Option 1: ...' lines, got {line[:60]!r}",
            )
        options.append(f"{LETTERS[len(options)]}. {match.group(3).strip()}")
        labels.append(f"{match.group(1)} {match.group(2)}")
    if len(options) < 2:
        raise AnnotationError(
            str(path), where, "question", "expected two or more caption lines after the question"
        )
    return lines[0].strip(), tuple(options), labels


# ---- the official rules ---------------------------------------------------------------------


def multi_choice_rule(prediction: str, answer: str) -> float | None:
    """eval_multi-choice.py's hand-made rules; None: no rule matched (the judge decides)."""
    if prediction == answer:
        return 1.0
    if prediction in ("A", "B", "C", "D"):
        return float(prediction == answer[0])
    if any(prediction.startswith(f"{c}.") for c in "ABCD"):
        return float(prediction.split(".")[0] == answer[0])
    if any(prediction.startswith(f"{c})") for c in "ABCD"):
        return float(prediction.split(")")[0] == answer[0])
    return None


def yes_no_rule(prediction: str, answer: str) -> float | None:
    """eval_yes_no.py's ``extract_pred``: the reply's start, lower-cased."""
    lowered = prediction.lower()
    pred = "yes" if lowered.startswith("yes") else "no" if lowered.startswith("no") else None
    return None if pred is None else float(pred == answer)


def caption_matching_rule(prediction: str, question: str, answer: str) -> float | None:
    """eval_caption_matching.py's ``eval_rule`` (a later kind of match overrides an earlier one)."""
    option_lines = question.split("\n")[1:]
    sentences = [line.split(": ")[1] for line in option_lines]
    labels = [line.split(": ")[0] for line in option_lines]
    labels += [
        label.replace("Sentence ", "").replace("Option ", "").replace("Caption ", "") for label in labels
    ]
    read = None
    for line in option_lines:
        if line == prediction:
            read = line
    for sentence in sentences:
        if sentence == prediction or (") " in prediction and sentence == prediction.split(") ")[1]):
            read = sentence
    for label in labels:
        if label == prediction or label == prediction.replace(".", ""):
            read = label
    if read is None:
        return None
    head = answer.split(": ")[0]
    return float(read in (answer, answer.split(":")[0], answer.split(": ")[1], head.split()[1]))


def rating_of(reply: str) -> float:
    """utils/eval_utils.py ``llm_output_to_rating`` (a reply with neither word: 0, as the
    script's retries end)."""
    if reply.startswith("Correct"):
        return 1.0
    if reply.startswith("Incorrect"):
        return 0.0
    if "Correct" in reply and "Incorrect" not in reply:
        return 1.0
    return 0.0


def caption_rating(reply: str, mc_answer: str) -> float:
    """eval_captioning.py ``parse_llm_output``: the judge's ``Answer:`` line against the letter."""
    if not reply:
        return -1.0
    answer = None
    for line in reply.split("\n"):
        line = line.strip()
        if "Answer" in line:
            answer = line.replace("Answer:", "").strip()
    answer = reply if answer is None else answer
    count = sum(answer.count(f"{c}.") for c in "ABCD")
    return float(answer.split(". ")[0] == mc_answer.split(". ")[0] and count == 1)


_NUMBERED = re.compile(r"^(\s*(?:<answer>)?\s*)(?:Option\s+)?([1-9])\b(.*)$", re.IGNORECASE | re.DOTALL)


def _numbered_to_letter(response: str, count: int) -> str:
    """``Option 2`` / ``2`` (an ``Option 1/2`` row answered by its label) -> ``B`` for the
    strict reader, which reads letters."""
    match = _NUMBERED.match(response)
    if match and 1 <= int(match.group(2)) <= count:
        return f"{match.group(1)}{LETTERS[int(match.group(2)) - 1]}{match.group(3)}"
    return response


def ask_judge(judge: dict[str, Any], prompt: str) -> str:
    """One call with the official system prompt; an unreachable judge is a scoring failure."""
    config = JudgeConfig.from_options(judge)
    if config is None:
        raise ScoringFailure("judge config has no base_url")
    config = dataclasses.replace(config, system_prompt=JUDGE_SYSTEM, max_tokens=128)
    try:
        reply, _ = chat(config, prompt)
    except JudgeUnavailable as exc:
        raise ScoringFailure(str(exc)) from None
    return (reply or "").strip()


@register
class TempCompass(Benchmark):
    name = "tempcompass"
    protocol_version = 3  # release's Option 1/2 rows, official prompts and scorers (2026-12)
    title = "TempCompass"
    category_fields = ("task_type", "dimension")
    video_defaults = {"fps": 2.0, "max_frames": 32}
    needs_judge = True
    annotation = "questions/{multi-choice,yes_no,caption_matching,captioning}.json; videos videos/<id>.mp4"
    official_source = "llyx97/TempCompass eval_{multi-choice,yes_no,caption_matching,captioning}.py"

    def load(self, root: Path) -> list[EvalItem]:
        items = []
        files = find_files(root, [f"questions/{t}.json" for t in TASKS], "TempCompass question files")
        mc_rows: dict[tuple[str, str], dict] = {}
        for path in files:
            task = path.stem
            for where, entry in read_records(path):
                video_id = entry.pop("__key__", None) if isinstance(entry, dict) else None
                if not isinstance(entry, dict) or video_id is None:
                    raise AnnotationError(
                        str(path), where, None, "expected {video_id: {dimension: [questions]}}"
                    )
                for dimension, questions in entry.items():
                    if not isinstance(questions, list):
                        raise AnnotationError(str(path), where, dimension, "expected a list of questions")
                    if task == "multi-choice" and questions:
                        mc_rows[(str(video_id), dimension)] = questions[0]
                    for index, row in enumerate(questions):
                        spot = f"{where} {dimension}[{index}]"
                        items.append(self._item(root, path, spot, task, str(video_id), dimension, index, row))
        for item in items:
            if item.categories["task_type"] == "captioning":
                self._attach_mc(item, mc_rows, root)
        return items

    def _item(
        self,
        root: Path,
        path: Path,
        where: str,
        task: str,
        video_id: str,
        dimension: str,
        index: int,
        row: dict,
    ) -> EvalItem:
        raw_question = field(row, "question", path, where)
        raw_answer = field(row, "answer", path, where)
        text, options, answer = raw_question, None, raw_answer
        meta: dict[str, Any] = {"release_question": raw_question, "release_answer": raw_answer}
        if task == "multi-choice":
            text, options = split_embedded_options(raw_question, path, where)
        elif task == "caption_matching":
            text, options, labels = _caption_options(raw_question, path, where)
            label = raw_answer.split(":")[0].strip()
            if label not in labels:
                raise AnnotationError(
                    str(path), where, "answer", f"{raw_answer[:60]!r} names none of the lines {labels}"
                )
            answer = LETTERS[labels.index(label)]
            meta["numbered"] = labels[0].startswith("Option")
        elif task == "yes_no":
            answer = raw_answer.strip().lower().rstrip(".")
            if answer not in ("yes", "no"):
                raise AnnotationError(str(path), where, "answer", f"expected yes or no, got {raw_answer!r}")
        else:
            meta["open"] = "generation"
            # "B. dunking a basketball": the strict reference is the text of information B.
            answer = raw_answer.split(". ", 1)[1] if re.match(r"^[A-D]\. ", raw_answer) else raw_answer
        if task == "multi-choice":
            answer = answer_letter(raw_answer, options, path, where)
        return EvalItem(
            benchmark=self.name,
            id=f"{task}/{video_id}/{dimension}/{index}",
            question=text,
            options=options,
            problem_type=TASKS[task],
            answer=answer,
            videos=(find_video(root, ("videos", ""), video_id),),
            categories={"task_type": task, "dimension": dimension},
            meta=meta,
            source=f"{path}:{where}",
        )

    def _attach_mc(self, item: EvalItem, mc_rows: dict[tuple[str, str], dict], root: Path) -> None:
        """Captioning is scored with the first multi-choice question of its video and dimension."""
        video_id, dimension = item.id.split("/")[1], item.categories["dimension"]
        row = mc_rows.get((video_id, dimension))
        if not isinstance(row, dict) or not row.get("question") or not row.get("answer"):
            path, where = item.source.rsplit(":", 1)
            raise AnnotationError(
                path,
                where,
                "question",
                f"the official captioning score asks the judge the first question of "
                f"{root / 'questions' / 'multi-choice.json'}[{video_id!r}][{dimension!r}], which is missing",
            )
        item.meta["mc_question"], item.meta["mc_answer"] = row["question"], row["answer"]

    def prompt(self, item: EvalItem, metas: Sequence[VideoMetadata], style: str, renderer: Any = None) -> str:
        if style == "reasoning":
            return default_prompt(item, style, renderer)
        task = item.categories["task_type"]
        return media_prefix(item) + item.meta["release_question"] + ANSWER_PROMPTS[task]

    def score(
        self, item: EvalItem, response: str, ctx: Any, metas: Sequence[VideoMetadata] = ()
    ) -> ItemScore:
        if item.meta.get("numbered"):
            response = _numbered_to_letter(response, len(item.options or ()))
        return default_score(item, response, ctx)

    def official_item(
        self, item: EvalItem, response: str, ctx: Any, metas: Sequence[VideoMetadata] = ()
    ) -> OfficialVerdict:
        task = item.categories["task_type"]
        prediction = response.replace("</s>", "").strip()
        if not prediction:
            return OfficialVerdict(
                values={"accuracy": 0.0}, note="no prediction: the official scripts rate it 0"
            )
        question, answer = item.meta["release_question"], item.meta["release_answer"]
        if task == "captioning":
            if not ctx.judge:
                return OfficialVerdict(needs_judge=True)
            prompt = (
                f"{CAPTION_PROMPT}\nVideo Description:{prediction}\nMulti-Choice Question:\n"
                f"{item.meta['mc_question']}\n"
            )
            reply = ask_judge(ctx.judge, prompt)
            return OfficialVerdict(
                values={"accuracy": caption_rating(reply, item.meta["mc_answer"])},
                extracted=reply[-200:] or None,
            )
        if task == "multi-choice":
            rating = multi_choice_rule(prediction, answer)
        elif task == "yes_no":
            rating = yes_no_rule(prediction, answer)
        else:
            rating = caption_matching_rule(prediction, question, answer)
        if rating is not None:
            return OfficialVerdict(values={"accuracy": rating}, extracted=prediction[:200])
        if not ctx.judge:
            return OfficialVerdict(
                values={"accuracy": 0.0},
                extracted=None,
                note="no official rule reads the answer and no judge is configured: rated 0 (--disable_llm)",
            )
        kind, header = JUDGE_HEADERS[task]
        prompt = (
            f"{_RATING_PROMPT.format(kind=kind)}\n{header}:\n{question}\nGround-Truth Answer: {answer}\n"
            f"Model Prediction: {prediction}"
        )
        reply = ask_judge(ctx.judge, prompt)
        return OfficialVerdict(
            values={"accuracy": rating_of(reply)},
            extracted=prediction[:200],
            note="no official rule reads the answer: the judge rated it",
        )

    def official_summary(
        self, records: list[dict[str, Any]], summary: dict[str, Any]
    ) -> dict[str, Any] | None:
        return grouped_official_mean(records, "task_type", name="avg (mean over task types)")
