"""MLVU (dev): long-video tasks; M-Avg over the multiple-choice tasks, G-Avg over generation.

Source: JUNJIE99/MLVU (``evaluation/multiple_choice_evaluation/choice_bench.py`` for the
multiple-choice tasks; ``evaluation/generation_evaluation/evaluate_ssc.py`` + ``calculate.py``
for sub-scene captioning, ``evaluate_summary.py`` + ``calculate_sum.py`` for summaries). The
data is the Hugging Face dataset MLVU/MVLU: ``MLVU/json/<n>_<task>.json`` (read below the
dataset root or its ``MLVU/`` folder; the repo's ``data/`` holds the same files), lists of ``{"video", "duration", "question", "candidates", "answer"
(the right candidate's text), "question_type"}``; ``8_sub_scene.json`` rows carry
``scoring_points`` and no candidates, ``9_summary.json`` rows neither. Videos:
``video/<json stem>/<video>`` beside ``json/``. Item ids: ``<json stem>/<row>``.

Strict: multiple choice by the rewards reader; generation by the project's judge, or ROUGE
without one (reported under that name).

Official:

* multiple choice (``check_ans``): the prompt ends in "Best Option: (", so the answer is read
  as the character just before the first ``)`` of the response when it has one, else the whole
  response, compared exactly with the option letter (no stripping, case counts). The project's
  prompts do not pre-fill "(", so a tagged ``<answer>A</answer>`` is officially wrong;
* ``sub_scene`` (``subPlot``): GPT-4-turbo gets the question, the row's ``scoring_points`` and
  the response and answers with a JSON dict ``{'score_accuracy': .., 'score_relevance': ..}``
  (1-5 each); ``calculate.py`` takes the number after each key's first ``: `` up to the next
  comma, in key order, and adds the first found to accuracy and the second to relevance (a
  reply with fewer adds 0; a number that does not parse stops ``calculate.py``: it is 0 here);
* ``summary``: the same with the reference summary, ``score_completeness`` and
  ``score_reliability``;
* M-Avg: the mean over the multiple-choice tasks of each task's accuracy; G-Avg: the mean over
  the two generation tasks of each task's mean total (accuracy + relevance, out of 10).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from easyvideor1.eval.benchmarks.base import (
    Benchmark,
    OfficialVerdict,
    answer_letter,
    field,
    find_files,
    find_video,
    letter_options,
    read_records,
    register,
)
from easyvideor1.eval.benchmarks.common import macro_mean
from easyvideor1.eval.benchmarks.official import grouped_official_mean, mean_official
from easyvideor1.eval.benchmarks.official_judge import ask, judged
from easyvideor1.eval.types import TEXT, EvalItem

# The official judge prompts (evaluate_ssc.py, evaluate_summary.py), reproduced because the
# official score is defined by them (the source's indentation and trailing spaces are dropped).
SSC_SYSTEM = """
##TASK DESCRIPTION:
You are required to evaluate a respondent's answer based on a provided question, some scoring points, and the respondent's answer. You should provide two scores. The first is the accuracy score, which should range from 1 to 5. The second is the relevance score, which should also range from 1 to 5. Below are the criteria for each scoring category.
##ACCURACY Scoring Criteria:
Evaluate the respondent's answer against specific scoring points as follows:
Score 1: The response completely misses the scoring point.
Score 3: The response mentions content related to the scoring point but is not entirely correct.
Score 5: The response accurately addresses the scoring point.
Calculate the average score across all scoring points to determine the final accuracy score.
##RELEVANCE Scoring Criteria:
Assess how the respondent's answer relates to the original question:
Score 1: The response is completely off-topic from the question.
Score 2: The response is partially related to the question but contains a significant amount of irrelevant content.
Score 3: The response primarily addresses the question, but the respondent seems uncertain about their own answer.
Score 4: The response mostly addresses the question and the respondent appears confident in their answer.
Score 5: The response is fully focused on addressing the question with no irrelevant content and demonstrates complete certainty.
----
##INSTRUCTION:
1. Evaluate Accuracy: First, assess and score each scoring point based on the respondent's answer. Calculate the average of these scores to establish the final accuracy score. Provide a detailed rationale before assigning your score.
2. Evaluate RELEVANCE: Assess the relevance of the respondent\u2019s answer to the question. Note that when evaluating relevance, the correctness of the answer is not considered; focus solely on how relevant the answer is to the question. Provide a comprehensive rationale before assigning your score.
3. Output Scores in JSON Format: Present the scores in JSON format as follows:
{'score_accuracy': score_acc, 'score_relevance': score_rele, 'total_score': score_acc + score_rele}
"""
SSC_USER = """
Please score the respondent's answer according to the steps in the Instructions. You must end with a JSON dict to store the scores.
Question: {question}
Scoring Points: {scoring_points}
Respondent's Answer: {pred}
"""
SUMMARY_SYSTEM = """
##TASK DESCRIPTION:
You are required to evaluate the performance of the respondent in the video summarization task based on the standard answer and the respondent's answer. You should provide two scores. The first is the COMPLETENESS score, which should range from 1 to 5. The second is the RELIABILITY score, which should also range from 1 to 5. Below are the criteria for each scoring category:
##COMPLETENESS Scoring Criteria:
The completeness score focuses on whether the summary covers all key points and main information from the video.
Score 1: The summary hardly covers any of the main content or key points of the video.
Score 2: The summary covers some of the main content and key points but misses many.
Score 3: The summary covers most of the main content and key points.
Score 4: The summary is very comprehensive, covering most to nearly all of the main content and key points.
Score 5: The summary completely covers all the main content and key points of the video.
##RELIABILITY Scoring Criteria:
The reliability score evaluates the correctness and clarity of the video summary. It checks for factual errors, misleading statements, and contradictions with the video content. If the respondent's answer includes details that are not present in the standard answer, as long as these details do not conflict with the correct answer and are reasonable, points should not be deducted.
Score 1: Contains multiple factual errors and contradictions; presentation is confusing.
Score 2: Includes several errors and some contradictions; needs clearer presentation.
Score 3: Generally accurate with minor errors; minimal contradictions; reasonably clear presentation.
Score 4: Very accurate with negligible inaccuracies; no contradictions; clear and fluent presentation.
Score 5: Completely accurate with no errors or contradictions; presentation is clear and easy to understand.
----
##INSTRUCTION:
1. Evaluate COMPLETENESS: First, analyze the respondent's answer according to the scoring criteria, then provide an integer score between 1 and 5 based on sufficient evidence.
2. Evaluate RELIABILITY: First, analyze the respondent's answer according to the scoring criteria, then provide an integer score between 1 and 5 based on sufficient evidence.
3. Output Scores in JSON Format: Present the scores in JSON format as follows:
{'score_completeness': score_comp, 'score_reliability': score_reli, 'total_score': score_comp + score_reli}
"""
SUMMARY_USER = """
Please score the respondent's answer according to the steps in the Instructions. You must end with a JSON dict to store the scores.
Standard Answer: {answer}
Respondent's Answer: {pred}
"""
GENERATION_KEYS = {
    "sub_scene": ("score_accuracy", "score_relevance"),
    "summary": ("score_completeness", "score_reliability"),
}


def official_choice(response: str) -> str:
    """``check_ans``: the character before the first ``)``, else the whole response."""
    if ")" in response:
        at = response.index(")")
        return response[at - 1 : at]  # at == 0 gives "" (Python slice [-1:0])
    return response


def official_scores(reply: str, keys: tuple[str, str]) -> list[float]:
    """``calculate.py``'s ``extract_scores``: per key found, the text after its first ``:``
    (skipping one character) up to the next comma, as a float; ``ValueError`` when not a number."""
    scores = []
    for key in keys:
        start = reply.find(key)
        if start == -1:
            continue
        begin = reply.find(":", start) + 2
        end = reply.find(",", begin)
        scores.append(float(reply[begin:end]))
    return scores


@register
class MLVU(Benchmark):
    name = "mlvu"
    title = "MLVU"
    protocol_version = 3  # official scoring; sub-scene scoring points kept (2026-12)
    category_fields = ("task",)
    video_defaults = {"fps": 1.0, "max_frames": 64}
    needs_judge = True
    annotation = "json/<n>_<task>.json; videos video/<json stem>/<video>"
    official_source = (
        "JUNJIE99/MLVU evaluation/multiple_choice_evaluation/choice_bench.py; "
        "evaluation/generation_evaluation/evaluate_ssc.py, calculate.py, evaluate_summary.py, calculate_sum.py"
    )

    def load(self, root: Path) -> list[EvalItem]:
        items = []
        # The Hub snapshot keeps both folders under MLVU/.
        patterns = ("json/*.json", "MLVU/json/*.json")
        for path in find_files(root, patterns, "MLVU task files (json/<n>_<task>.json)"):
            for where, row in read_records(path):
                task = (
                    str(row.get("question_type") or path.stem.split("_", 1)[-1])
                    if isinstance(row, dict)
                    else path.stem
                )
                video = find_video(
                    path.parent.parent, (f"video/{path.stem}", "video", ""), field(row, "video", path, where)
                )
                answer = field(row, "answer", path, where, (str, int))
                candidates = row.get("candidates")
                common = dict(
                    benchmark=self.name,
                    id=f"{path.stem}/{where.split()[-1]}",
                    question=field(row, "question", path, where),
                    videos=(video,),
                    categories={"task": task},
                    source=f"{path}:{where}",
                )
                if candidates:
                    options = letter_options(candidates, path, where, "candidates")
                    items.append(
                        EvalItem(
                            **common,
                            options=options,
                            problem_type="multiple choice",
                            answer=answer_letter(answer, options, path, where),
                        )
                    )
                else:
                    # sub-scene rows are judged against their scoring points (evaluate_ssc.py).
                    sub_scene = path.stem.endswith("sub_scene") or task == "subPlot"
                    points = field(row, "scoring_points", path, where, list) if sub_scene else None
                    items.append(
                        EvalItem(
                            **common,
                            problem_type="open-ended",
                            answer=str(answer),
                            meta={
                                "open": "generation",
                                "generation": "sub_scene" if sub_scene else "summary",
                                "scoring_points": points,
                            },
                        )
                    )
        return items

    @judged
    def official_item(self, item: EvalItem, response: str, ctx: Any, metas: Any = ()) -> OfficialVerdict:
        if item.problem_type == "multiple choice":
            choice = official_choice(response)
            return OfficialVerdict(values={"accuracy": float(choice == item.answer)}, extracted=choice)
        kind = item.meta["generation"]
        keys = GENERATION_KEYS[kind]
        if not response:
            return OfficialVerdict(
                values={keys[0]: 0.0, keys[1]: 0.0, "total": 0.0},
                note="no response: not sent to the judge, scored 0",
            )
        question = item.question.replace("\n", "")  # evaluate_*.py strip newlines from the question
        if kind == "sub_scene":
            system = SSC_SYSTEM
            prompt = SSC_USER.format(
                question=question, scoring_points=item.meta["scoring_points"], pred=response
            )
        else:
            system = SUMMARY_SYSTEM
            prompt = SUMMARY_USER.format(answer=item.answer, pred=response)
        # The official call sets no token limit; the rationale comes before the scores.
        reply = ask(ctx, prompt, system=system, max_tokens=2048)
        try:
            scores = official_scores(reply, keys)
        except ValueError:
            scores, note = [], "judge reply's score is not a number (calculate.py would stop): 0"
        else:
            note = None
        first, second = (scores + [0.0, 0.0])[:2]
        return OfficialVerdict(
            values={keys[0]: first, keys[1]: second, "total": first + second},
            extracted=reply[-300:],
            note=note,
        )

    def official_summary(
        self, records: list[dict[str, Any]], summary: dict[str, Any]
    ) -> dict[str, Any] | None:
        mc = [r for r in records if r["problem_type"] == "multiple choice"]
        gen = [r for r in records if r["problem_type"] != "multiple choice"]
        m_avg = grouped_official_mean(mc, "task", "accuracy", name="m_avg (mean over tasks)")
        g_means = {}
        for task in sorted({r["categories"]["task"] for r in gen}):
            mean = mean_official([r for r in gen if r["categories"]["task"] == task], "total", kind=TEXT)
            if mean is not None:
                g_means[task] = mean["value"]
        g_avg = sum(g_means.values()) / len(g_means) if g_means else None
        if m_avg is None:
            if g_avg is None:
                return None
            return {
                "metric": "g_avg (out of 10)",
                "kind": TEXT,
                "value": g_avg,
                "n": len(gen),
                "over": g_means,
            }
        if g_avg is not None:
            m_avg.update(g_avg=g_avg, g_avg_over=g_means)  # out of 10, as the official scripts print it
        return m_avg

    def extra_metrics(self, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
        mc = sorted({r["categories"]["task"] for r in records if r["problem_type"] == "multiple choice"})
        gen = sorted({r["categories"]["task"] for r in records if r["problem_type"] != "multiple choice"})
        macro_mean(summary, "task", "accuracy", name="m_avg", members=mc)
        for metric in ("judge_score", "rouge"):
            macro_mean(summary, "task", metric, name=f"g_avg_{metric}", kind=TEXT, members=gen)
