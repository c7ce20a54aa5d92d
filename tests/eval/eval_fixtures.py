"""Tiny fixtures for every benchmark adapter, written in each benchmark's own annotation format.

Videos are small real H.264 files (``write_video``); each fixture function writes its
annotation files under ``root`` exactly as the benchmark ships them (JSON/JSONL exports
where the release is parquet) and returns the number of items the adapter must load.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

from easyvideor1.data.synth import generate_synthetic
from easyvideor1.video.encode import write_video

SIZE = 56  # a multiple of the Qwen2/2.5 factor 28: frames stay at their size
FPS = 4.0


def _frames(seed: int, count: int = 8) -> np.ndarray:
    rng = np.random.default_rng(seed)
    frames = np.zeros((count, SIZE, SIZE, 3), dtype=np.uint8)
    colour = rng.integers(40, 255, size=3)
    for t in range(count):
        x = (4 * t + seed) % (SIZE - 16)
        frames[t, 10:26, x:x + 16] = colour
    return frames


class VideoBank:
    """Writes a few distinct clips once and hard-links them wherever a fixture needs a video."""

    def __init__(self, folder: Path, count: int = 3):
        folder.mkdir(parents=True, exist_ok=True)
        self.clips = []
        for seed in range(count):
            path = folder / f"clip{seed}.mp4"
            if not path.exists():
                write_video(path, _frames(seed), FPS)
            self.clips.append(path)
        self._next = 0

    def put(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            os.link(self.clips[self._next % len(self.clips)], path)
            self._next += 1
        return path


def _json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


def _jsonl(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def videomme(root: Path, bank: VideoBank) -> int:
    # Rows of the release (lmms-lab/Video-MME test parquet, exported): video 001's three questions.
    bank.put(root / "data" / "fFjv93ACGo8.mp4")
    video = {"video_id": "001", "duration": "short", "domain": "Knowledge", "sub_category": "Humanity & History",
             "url": "https://www.youtube.com/watch?v=fFjv93ACGo8", "videoID": "fFjv93ACGo8"}
    rows = [
        dict(video, question_id="001-1", task_type="Counting Problem",
             question="When demonstrating the Germany modern Christmas tree is initially decorated with apples, "
                      "candles and berries, which kind of the decoration has the largest number?",
             options=["A. Apples.", "B. Candles.", "C. Berries.", "D. The three kinds are of the same number."],
             answer="C"),
        dict(video, question_id="001-2", task_type="Information Synopsis", question="What is the genre of this video?",
             options=["A. It is a news report that introduces the history behind Christmas decorations.",
                      "B. It is a documentary on the evolution of Christmas holiday recipes.",
                      "C. It is a travel vlog exploring Christmas markets around the world.",
                      "D. It is a tutorial on DIY Christmas ornament crafting."], answer="A"),
        dict(video, question_id="001-3", task_type="Counting Problem",
             question="How many red socks are above the fireplace at the end of this video?",
             options=["A. 1.", "B. 4.", "C. 2.", "D. 3."], answer="D"),
    ]
    _jsonl(root / "videomme" / "test-00000-of-00001.jsonl", rows)
    return 3


def videomme_v2(root: Path, bank: VideoBank) -> int:
    # test.parquet exported to JSONL; level and heads are set on a group's last question only.
    rows = []
    options = "\n".join(f"{c}. {w}." for c, w in zip("ABCDEFGH", ("one", "two", "three", "four", "five", "six",
                                                                   "seven", "eight")))
    for v, group_type, structure in ((1, "relevance", None), (2, "logic", "[1, 2, 3, 4]")):
        bank.put(root / "data" / f"00{v}.mp4")
        for q in range(4):
            last = q == 3
            rows.append({"video_id": f"00{v}", "question_id": f"00{v}-{q + 1}", "question": f"Question {q} on {v}?",
                         "options": options, "answer": "ABCDEFGH"[q + v], "group_type": group_type,
                         "group_structure": structure, "level": v if last else None,
                         "second_head": "Temporal" if last else None, "third_head": "Order" if last else None})
    _jsonl(root / "test.jsonl", rows)
    return 8


def mvbench(root: Path, bank: VideoBank) -> int:
    # The bounded row gets its own 4 s video: its 2 s bound then holds 8 frames, so the clip's
    # frames (tests/eval/test_eval_clips.py) differ from a whole-video sampling.
    bounded = root / "video" / "star" / "Charades_v1_480" / "A1.mp4"
    bounded.parent.mkdir(parents=True, exist_ok=True)
    write_video(bounded, _frames(7, 16), FPS)
    bank.put(root / "video" / "clevrer" / "video_validation" / "v2.mp4")
    _json(root / "json" / "action_sequence.json", [
        {"video": "A1.mp4", "question": "What did the person do first?", "candidates": ["Sat down.",
                                                                                        "Stood up."],
         "answer": "Stood up.", "start": 0.5, "end": 2.5}])
    _json(root / "json" / "moving_direction.json", [
        {"video": "v2.mp4", "question": "Which way does the cube move?", "candidates": ["left", "right",
                                                                                        "up"],
         "answer": "right"},
        {"video": "v2.mp4", "question": "Which way does the sphere move?", "candidates": ["left", "right",
                                                                                          "up"],
         "answer": "up"}])
    return 3


def tempcompass(root: Path, bank: VideoBank) -> int:
    # Video 1034419625: rows of the release (llyx97/TempCompass questions/*.json), incl. an
    # "Option 1/2" caption-matching row. 1001/1002: short rows in the same layout.
    bank.put(root / "videos" / "1034419625.mp4")
    bank.put(root / "videos" / "1001.mp4")
    bank.put(root / "videos" / "1002.mp4")
    dunk = {"action": [
        {"question": "What is the man doing in the video?\nA. dunking a basketball\nB. dribbling a basketball\n"
                     "C. passing a basketball", "answer": "A. dunking a basketball"}]}
    _json(root / "questions" / "multi-choice.json", {
        "1034419625": dunk,
        "1001": {"direction": [{"question": "Where is the square going?\nA. left\nB. right\nC. up",
                                "answer": "B. right"}]},
        "1002": {"speed": [{"question": "How fast does it move?\nA. slowly\nB. quickly",
                            "answer": "A. slowly"}]}})
    _json(root / "questions" / "yes_no.json", {
        "1034419625": {"action": [{"question": "Is the man dunking?", "answer": "yes"}]},
        "1001": {"direction": [{"question": "Is the square moving right?", "answer": "yes"},
                               {"question": "Is the square moving left?", "answer": "no"}]}})
    _json(root / "questions" / "caption_matching.json", {
        "1034419625": {"action": [
            {"question": "Which description is a more suitable match for the video?\nOption 1: The man is dribbling a "
                         "basketball.\nOption 2: A man is dunking a basketball.",
             "answer": "Option 2: A man is dunking a basketball."},
            {"question": "Which sentence better captures the essence of the video?\nSentence A: A man is dunking a "
                         "basketball.\nSentence B: A video showing a person passing a basketball.",
             "answer": "Sentence A: A man is dunking a basketball."}]},
        "1002": {"order": [{"question": "Which caption matches the video?\nCaption A: a square moves right\n"
                                        "Caption B: a square moves left",
                            "answer": "Caption A: a square moves right"}]}})
    _json(root / "questions" / "captioning.json", {
        "1034419625": {"action": [{
            "question": "You will be presented with a video and several pieces of information. One piece of "
                        "information is consistent with the video while the others are not. Please identify the "
                        "information that consistent with the video and generate a video caption accordingly.\n"
                        "Information A: {'subject': 'man', 'action': 'dribbling a basketball'}\nInformation B: "
                        "{'subject': 'man', 'action': 'dunking a basketball'}\nInformation C: {'subject': 'man', "
                        "'action': 'passing a basketball'}\nGenerated Caption:",
            "answer": "B. dunking a basketball"}]},
        "1001": {"direction": [{"question": "Describe the movement in the video.\nGenerated Caption:",
                                "answer": "B. right"}]}})
    return 11


def motionbench(root: Path, bank: VideoBank) -> int:
    bank.put(root / "videos" / "m1.mp4")
    _jsonl(root / "video_info.meta.jsonl", [
        {"key": "m1", "video_path": "m1.mp4", "question_type": "Motion Recognition", "qa": [
            {"uid": "u1", "question": "What motion is shown?\nA. waving\nB. jumping\nC. running",
             "answer": "C"},
            {"uid": "u2", "question": "What moves?\nA. a car\nB. a square", "answer": "B"},
            {"uid": "u3", "question": "Hidden?\nA. x\nB. y", "answer": "NA"}]}])
    return 2


def lvbench(root: Path, bank: VideoBank) -> int:
    bank.put(root / "videos" / "k1.mp4")
    _jsonl(root / "video_info.meta.jsonl", [
        {"key": "k1", "type": "documentary", "qa": [
            {"uid": "1", "question": "Who appears first?\n(A) a cat\n(B) a dog\n(C) a bird\n(D) a fish",
             "answer": "B", "question_type": ["entity recognition",
                                              "temporal grounding"], "time_reference": "00:01"},
            {"uid": "2", "question": "What is the event?\n(A) a race\n(B) a talk\n(C) a game\n(D) a meal",
             "answer": "D", "question_type": ["event understanding"], "time_reference": ""}]}])
    return 2


def longvideobench(root: Path, bank: VideoBank) -> int:
    bank.put(root / "videos" / "lv1.mp4")
    _json(root / "lvb_val.json", [
        {"video_id": "lv1", "question": "When the square turns, what colour is it?", "candidates": ["red",
                                                                                                    "blue",
         "green", "white"], "correct_choice": 2, "position": [1], "topic_category": "NP-News-Programs",
         "question_category": "S2E", "level": "L1-Perception", "id": "lv1_0", "video_path": "lv1.mp4",
         "subtitle_path": "lv1_en.json", "duration_group": 15, "starting_timestamp_for_subtitles": 0,
         "duration": 2.0, "view_count": 1}])
    # A row of the release's lvb_val.json, verbatim (86CxyhFV9MI_0).
    bank.put(root / "videos" / "86CxyhFV9MI.mp4")
    rows = json.loads((root / "lvb_val.json").read_text())
    rows.append({
        "video_id": "86CxyhFV9MI", "question": "In the video, which subtitles appear at the same time as the man with "
        "black hair, dressed in grey clothes with black sleeves, on stage?",
        "question_wo_referring_query": "Which subtitles appear at the same time?", "candidates": [
            "promisc has come to an end, in and run away countless times, i was just scared, i still",
            "run away countless times, i was just scared, i still and front of our crown, like a world of souls,",
            "promisc has come to an end, in and front of our crown, like a world of souls,",
            "promisc has come to an end, in and captain of the godson, three three three three three three"],
        "correct_choice": 1, "position": [854, 948, 1373], "topic_category": "NP-News-Programs",
        "question_category": "TOS", "level": "L2-Relation", "id": "86CxyhFV9MI_0", "video_path": "86CxyhFV9MI.mp4",
        "subtitle_path": "86CxyhFV9MI_en.json", "duration_group": 600, "starting_timestamp_for_subtitles": 0,
        "duration": 190.16, "view_count": 259852})
    _json(root / "lvb_val.json", rows)
    return 2


def mlvu(root: Path, bank: VideoBank) -> int:
    # MLVU/MVLU on the Hub: MLVU/json/<n>_<task>.json, MLVU/video/<n>_<task>/<video>; rows as released.
    base = root / "MLVU"
    bank.put(base / "video" / "1_plotQA" / "movie101_66.mp4")
    bank.put(base / "video" / "4_count" / "count_126.mp4")
    bank.put(base / "video" / "8_sub_scene" / "subPlot_new_all_126.mp4")
    bank.put(base / "video" / "9_summary" / "217.mp4")
    _json(base / "json" / "1_plotQA.json", [
        {"video": "movie101_66.mp4", "duration": 246, "question": "What color is the main male character in the video?",
         "candidates": ["Yellow", "Red", "Green", "Blue"], "answer": "Yellow", "question_type": "plotQA"}])
    _json(base / "json" / "4_count.json", [
        {"video": "count_126.mp4", "duration": 572.8599999999999,
         "question": "Throughout this video, what is the total count of occurrences for the scene featuring the "
                     "'playing trombone' action", "candidates": ["2", "1", "5", "4"], "answer": "1",
         "question_type": "count"}])
    _json(base / "json" / "8_sub_scene.json", [
        {"video": "subPlot_new_all_126.mp4", "duration": 5632.830200880858,
         "question": "Please describe the scene when the man in the green plaid shirt, wearing sunglasses, leads "
                     "the football players into the golf course.",
         "answer": "The man in the green plaid shirt, wearing sunglasses, leads the football players into the golf "
                   "course with a swagger.", "question_type": "subPlot",
         "scoring_points": ["The man leads the football players with a swagger",
                            "A man in a suit runs to the three people on the field"]}])
    _json(base / "json" / "9_summary.json", [
        {"video": "217.mp4", "duration": 480.0, "question": "Please summarize this video, including its main content.",
         "answer": "The video starts with waves lapping against the rocks, creating a spray. Then, a boat appears "
                   "with two men on board.", "question_type": "summary"}])
    return 4


def video_holmes(root: Path, bank: VideoBank) -> int:
    # Benchmark/test_Video-Holmes.json rows ("Question ID" numbers the questions of a video), videos_cropped/.
    bank.put(root / "videos_cropped" / "RSmjqss0XKQ.mp4")
    _json(root / "test_Video-Holmes.json", [
        {"video ID": "RSmjqss0XKQ", "Question ID": 1, "Question Type": "SR",
         "Question": "What is the relationship between the woman in blue and the man in green?",
         "Options": {"A": "Cleaners", "B": "Colleagues from the same department", "C": "Siblings",
                     "D": "Strangers who collided accidentally", "E": "Undercover police officers",
                     "F": "Office coworkers"}, "Answer": "A",
         "Explanation": "Both wear cleaning uniforms during elevator maintenance work."},
        {"video ID": "RSmjqss0XKQ", "Question ID": 2, "Question Type": "IMC",
         "Question": "The man in white kicked the printer at 00:05 with what intention?",
         "Options": {"A": "Testing its sturdiness", "B": "Venting anger at the broken machine",
                     "C": "Trying to activate hidden functions", "D": "Signaling colleagues for help",
                     "E": "Warming up for physical exercise", "F": "Investigating suspicious noises"}, "Answer": "B",
         "Explanation": "His frustrated expression indicates impulsive anger toward the device."}])
    return 2


def minerva(root: Path, bank: VideoBank) -> int:
    # minerva.json with the fields the release README lists (key, video_id = a YouTube id, question, answer,
    # answer_choice_0..4, answer_id, reasoning, question_type = skills, split = coarse and category = fine
    # domain); no released row is public here, so the values are made up (see docs/evaluation.md).
    bank.put(root / "videos" / "yt1.mp4")
    _json(root / "minerva.json", [
        {"key": "k1", "video_id": "yt1", "question": "How many times does the square cross the centre?",
         "answer": "twice", "answer_id": 1, "answer_choice_0": "once", "answer_choice_1": "twice",
         "answer_choice_2": "never", "answer_choice_3": "three times", "answer_choice_4": "four times",
         "reasoning": "...", "question_type": "Counting, Temporal Reasoning", "split": "Short Films",
         "category": "Animation"}])
    return 1


def vcrbench(root: Path, bank: VideoBank) -> int:
    # v1/videos/meta_info_video.json; video_path is relative to the annotation's folder. Rows 3 and 0 of the
    # repo's eval_code/input.json (its "response" column dropped), and a grounding row of the same layout.
    base = root / "v1" / "videos"
    plot = "video/videoEspresso/Law.Abiding.Citizen.2009__#01-14-42_01-15-38_label_G-0-0.mp4"
    fight = "video/videoEspresso/Kill.Bill.Vol.1.2003__#0-05-55_0-08-54_label_B1-0-0.mp4"
    bank.put(base / plot)
    bank.put(base / fight)
    empty = {"A": "", "B": "", "C": "", "D": ""}
    rows = [
        {"id": 3, "video_path": plot, "duration": 56, "dimension": "Video Plot Analysis",
         "question": "Why didn't the Black man go to rescue the trapped woman after the explosion?A. He and the "
                     "woman are in a hostile relationship.\nB. He prioritized rescuing another woman.\nC. Another "
                     "man rescued the woman.\nD. An explosion occurred again at the scene.\n",
         "multiple-choice": True,
         "choices": {"A": "He and the woman are in a hostile relationship.",
                     "B": "He prioritized rescuing another woman.", "C": "Another man rescued the woman.",
                     "D": "An explosion occurred again at the scene."}, "answer": "D",
         "reasoning": ["1. 0:10-0:20, a second explosion occurs."]},
        {"id": 0, "video_path": fight, "duration": 179, "dimension": "Temporal Spatial Reasoning",
         "question": "In which room does the second fight in the video take place?", "multiple-choice": False,
         "choices": empty, "answer": "Kitchen",
         "reasoning": ["1. 0:07-0:55, two women engage in a physical altercation in a room with blue walls.",
                       "2. 0:55-1:02, two women entered the kitchen and continued fighting."]},
        {"id": 2, "video_path": fight, "duration": 179, "dimension": "Video Temporal Grounding",
         "question": "When does the second fight take place?", "multiple-choice": False, "choices": empty,
         "answer": "[0, 2]", "reasoning": ["1. It takes place from 0:00 to 0:02."]}]
    _json(base / "meta_info_video.json", rows)
    return 3


def videoreasonbench(root: Path, bank: VideoBank) -> int:
    # questions/<demo>.json: an object keyed by question id (the repo's layout); rows of questions/hrd.json.
    bank.put(root / "videos" / "hrd" / "state3_op5_end.mp4")
    intro = "The video presents a sliding puzzle on a 3x3 board. Please carefully watch the video and answer the "
    tail = "\n\nProvide a summary of the final answer after 'Final Answer:'"
    common = {"video": "videos/hrd/state3_op5_end.mp4", "visible_time": "end", "num_state": 3, "num_operation": 5,
              "moves": ["down", "right", "up", "up", "left"],
              "states": [[[6, 5, 8], [4, 3, 0], [2, 1, 7]], [[6, 8, 0], [4, 5, 7], [2, 3, 1]]]}
    _json(root / "questions" / "hrd.json", {
        "state3_op5_counting_operation_end": dict(
            common, question=intro + "following question:\n\nHow many times was the 'downward' move performed in "
            "the video? For each occurrence, provide the coordinate of the square before the move." + tail,
            answer="1: (a,3)", dim="counting_operation"),
        "state3_op5_order_state_end": dict(
            common, question=intro + "following question:\n\nWhat is the arrangement of numbers on the board at "
            "the start of the video?" + tail,
            answer="(a,1): 2\n(a,2): 1\n(a,3): 7\n(b,1): 4\n(b,2): 3\n(b,3): 0\n(c,1): 6\n(c,2): 5\n(c,3): 8",
            dim="order_state")})
    return 2


def longvideo_reason(root: Path, bank: VideoBank) -> int:
    # test.jsonl (row 0 as released, options shortened): options embedded in "problem"; the video
    # archives extract into longvideo_eval_subset<N>/.
    bank.put(root / "longvila_videos" / "I_Q3ajyOrcI.mp4")
    bank.put(root / "longvideo_eval_subset3" / "lr2.mp4")
    _jsonl(root / "test.jsonl", [
        {"problem_id": 0, "problem": "What is the primary intention behind the video's sequence of showcasing an "
         "African elephant (0:00:00-0:00:30) ... a cheetah (0:08:00-0:08:50)?\nA. To rank the animals by size.\n"
         "B. To contrast human athleticism with animal locomotion.\nC. To show a zoo.\nD. To teach drawing.",
         "data_type": "video", "problem_type": "goal", "reasoning": "The sequence begins by showcasing ...",
         "videos": "longvila_videos/I_Q3ajyOrcI.mp4", "answer": "<answer>B</answer>"},
        {"problem_id": 1, "problem": "Which way does it move first?\nA. left\nB. right\nC. up\nD. down",
         "data_type": "video", "problem_type": "temporal", "reasoning": "...", "videos": "longvila_videos/lr2.mp4",
         "answer": "<answer>B</answer>"}])
    return 2


def mmvu(root: Path, bank: VideoBank) -> int:
    # data/validation.json rows (validation_1, validation_0), metadata shortened; the Hub's videos/<subject>/<n>.mp4.
    bank.put(root / "videos" / "Chemistry" / "0.mp4")
    bank.put(root / "videos" / "Art" / "0.mp4")
    hub = "https://huggingface.co/datasets/yale-nlp/MMVU/resolve/main/videos"
    _json(root / "validation.json", [
        {"id": "validation_1", "video": f"{hub}/Chemistry/0.mp4",
         "youtube_url": "https://www.youtube.com/watch?v=6HuyUxJBY3E", "question_type": "multiple-choice",
         "metadata": {"subject": "Chemistry", "textbook": "Chemistry, 2nd Edition",
                      "knowledge": ["https://en.wikipedia.org/wiki/Ideal_gas_law"], "rationale": "1. ..."},
         "question": "Assume that 2.24 liters of gas fully participates in the reaction shown in the video under "
                     "the standard temperature and pressure condition, how many grams of precipitate are produced "
                     "approximately?",
         "choices": {"A": "10.0", "B": "5.0", "C": "12.0", "D": "15.0", "E": "20.0"}, "answer": "A"},
        {"id": "validation_0", "video": f"{hub}/Art/0.mp4",
         "youtube_url": "https://www.youtube.com/watch?v=VkqytRr85ao", "question_type": "open-ended",
         "metadata": {"subject": "Art", "textbook": "The Filmmaker's Handbook",
                      "knowledge": ["https://en.wikipedia.org/wiki/Dolly_zoom"], "rationale": "..."},
         "question": "Which cinematic shooting technique is shown in the video?",
         "choices": {"A": "", "B": "", "C": "", "D": "", "E": ""}, "answer": "Dolly Zoom"}])
    return 2


def videommmu(root: Path, bank: VideoBank) -> int:
    # Rows of the benchmark's data files (EvolvingLMMs-Lab/VideoMMMU data/*_video.json; the
    # Perception rows carry no question_type), questions shortened; videos in the discipline
    # group folders of the release's zips (<Group>/<id>.mp4). The same id recurs per track.
    bank.put(root / "Science" / "dev_Biology_3.mp4")
    bank.put(root / "Science" / "validation_Chemistry_19.mp4")
    _jsonl(root / "Perception.jsonl", [{
        "id": "dev_Biology_3", "link_selected": "https://www.youtube.com/watch?v=U7YqCUd_ZfA",
        "question": "The video gives two examples of aldose and ketose, how many carbon atoms do they have "
                    "respectively?",
        "options": ["3, 3", "3, 4", "3, 5", "3, 6", "4, 3", "4, 4", "4, 5", "4, 6", "5, 5", "5, 6"],
        "answer": "G"}])
    _jsonl(root / "Adaptation.jsonl", [
        {"id": "dev_Biology_3", "link_selected": "https://www.youtube.com/watch?v=U7YqCUd_ZfA",
         "question": "<image 1> What kind of sugar is this, aldose or ketose?",
         "options": ["aldose", "ketose", "glucose", "fructose", "ribose"], "answer": "A",
         "question_type": "multiple-choice"},
        {"id": "validation_Chemistry_19", "link_selected": "https://www.youtube.com/watch?v=cmG9CWpfFOY",
         "question": "Consider the structure of the amino acid isoleucine. <image 1>  How many optical isomers "
                     "does isoleucine have?", "options": [], "answer": "4", "question_type": "open"}])
    return 3


def videomathqa(root: Path, bank: VideoBank) -> int:
    # The two parquet files (mcq, multi_binary) exported to JSONL; the release has five options.
    bank.put(root / "videos" / "mq1.mp4")
    common = {"videoID": "mq1", "question_id": 7, "category": "Geometry Area", "length": "short",
              "question": "What is the area of the square (cm^2)?", "steps": '{"1": "Read the side: 4 cm."}'}
    # Fields as lmms-eval's tasks/videomathqa/utils.py reads them (the parquet files' columns).
    _jsonl(root / "videomathqa_mcq_test.jsonl",
           [dict(common, options=["(A) 4", "(B) 8", "(C) 16", "(D) 12", "(E) 20"], answer="C")])
    _jsonl(root / "videomathqa_mbin_test.jsonl", [dict(common, options=["(A) 16", "(B) 4"], answer="A"),
                                                  dict(common, options=["(A) 8", "(B) 16"], answer="B")])
    return 3  # one MCQ row + two multi-binary rows


def vsibench(root: Path, bank: VideoBank) -> int:
    # The test split exported to JSONL, rows as released (ids unique over the split; MC options
    # "A. text" with a letter ground truth, numeric rows with options null and the number as a string).
    bank.put(root / "scannet" / "scene0191_00.mp4")
    bank.put(root / "arkitscenes" / "41069025.mp4")
    _jsonl(root / "test.jsonl", [
        {"id": 1, "dataset": "arkitscenes", "scene_name": "41069025", "question_type": "object_counting",
         "question": "How many chair(s) are in this room?", "ground_truth": "4", "options": None},
        {"id": 2, "dataset": "arkitscenes", "scene_name": "41069025",
         "question_type": "object_rel_direction_easy",
         "question": "If I am standing by the bed and facing the lamp, is the door to the left or the right of "
                     "the lamp?", "ground_truth": "B", "options": ["A. left", "B. right"]},
        {"id": 3, "dataset": "scannet", "scene_name": "scene0191_00", "question_type": "object_rel_direction_hard",
         "question": "If I am standing by the sofa and facing the tv, is the table to my front-left, front-right, "
                     "back-left, or back-right?", "ground_truth": "A",
         "options": ["A. front-left", "B. front-right", "C. back-left", "D. back-right"]}])
    return 3


def charades_sta(root: Path, bank: VideoBank) -> int:
    bank.put(root / "videos" / "3MSZA.mp4")
    bank.put(root / "videos" / "AO8RW.mp4")
    (root / "charades_sta_test.txt").write_text("3MSZA 0.5 1.5##person turn a light on.\n"
                                                "AO8RW 0.0 1.0##a person is putting a book on a shelf.\n")
    return 2


def stvg(root: Path, bank: VideoBank) -> int:
    bank.put(root / "videos" / "person1.mp4")
    _json(root / "test_v2.json", {"person1.mp4": {
        "English": "The man in red walks to the left.", "st_frame": 2, "ed_frame": 6, "st_time": 0.5,
        "ed_time": 1.5, "img_num": 8, "img_hw": [SIZE, SIZE],
        "bbox": [[4, 10, 16, 16], [8, 10, 16, 16], [12, 10, 16, 16], [16, 10, 16, 16], [20, 10, 16, 16]]}})
    return 1


def ovobench(root: Path, bank: VideoBank) -> int:
    # Rows of the release's data/ovo_bench_new.json (ids 0, 1319, 1558, 1468; long texts and
    # probe lists shortened); clips as utils/chunk_videos.py names them.
    for name in ("0", "1319", "1558_0", "1558_1", "1468_0"):
        bank.put(root / "chunked_videos" / f"{name}.mp4")
    _json(root / "ovo_bench_new.json", [
        {"id": 0, "task": "EPM", "video": "Ego4D/clips/ec4a3ba3-eb00-4aa8-9b41-36043ece98f7.mp4", "realtime": 215,
         "question": "Who did I communicate to  when chopping egg plants?", "answer": "a person with blue shirt",
         "options": ["a person with brown shirt", "a person with green shirt", "a person with blue shirt",
                     "a person with white shirt"], "gt": 2},
        {"id": 1319, "task": "OCR", "video": "AutoEvalMetaData/106.mp4", "realtime": 54.2,
         "question": "What are the names listed on each lane of the pool?", "answer": "Rapsys, Di Cola",
         "options": ["Rapsys, Di Cola", "Leclos, Vekovishchev", "Fraser-Holmes, Krutohzmov", "Lochte, Dressel"],
         "gt": 0},
        {"id": 1558, "task": "REC", "video": "perception_test/video_4017.mp4", "activity": "breaking something",
         "start_times": [6], "end_times": [17], "test_info": [{"realtime": 17, "count": 1},
                                                              {"realtime": 19, "count": 1}]},
        {"id": 1468, "task": "CRR", "video": "MovieNet/tt0048028.mp4",
         "question": "The woman in a black coat walks towards the direction of the black car, what action does "
                     "she take to the car?", "answer": "She walks past the car.", "ask_time": 297,
         "clue_time": 308, "test_info": [{"realtime": 297, "type": 0}]}])
    return 5


def odvbench(root: Path, bank: VideoBank) -> int:
    # ODVbench.json (no ids; video paths start with the extracted zip's name); a 4 s clip seen up to "end".
    clip = root / "TOI_Recognition" / "test_video" / "drive1.mp4"
    clip.parent.mkdir(parents=True, exist_ok=True)
    write_video(clip, _frames(5, 16), FPS)
    _json(root / "ODVbench.json", [
        {"video": "TOI_Recognition/test_video/drive1.mp4", "question": "Is the car ahead braking?",
         "candidates": ["yes, sharply", "no", "it is turning", "unknown"], "answer": "no",
         "task": "Targeting single dynamic objects", "subtask": "Motion state", "start": 0, "end": 2.0},
        {"video": "TOI_Recognition/test_video/drive1.mp4", "question": "Will the car ahead stop?",
         "candidates": ["yes", "no"], "answer": "yes", "task": "Targeting single dynamic objects",
         "subtask": "Motion prediction", "subsubtask": "Vehicle", "start": 0, "end": 3.5}])
    return 2


def livesports3k_qa(root: Path, bank: VideoBank) -> int:
    # LiveSports-3K-QA.json; event 1 is pre-cut (clips/<video_id>_<begin>_<end>.mp4), event 2 is a window.
    bank.put(root / "clips" / "ls1_12.5_18.25.mp4")
    bank.put(root / "videos" / "ls2.mp4")
    _json(root / "LiveSports-3K-QA.json", [
        {"video_id": "ls1", "event_id": 3, "begin": 12.5, "end": 18.25, "q_id": 1, "q_type": "Who", "OCR": 1,
         "question": "Who scores the goal?",
         "options": ["A: player 7", "B: player 9", "C: player 10", "D: nobody"], "answer": "C"},
        {"video_id": "ls2", "event_id": 1, "begin": 0.0, "end": 2.0, "q_id": 1, "q_type": "When", "OCR": 0,
         "question": "When does the square start moving?",
         "options": ["A: at once", "B: after a pause", "C: at the end", "D: never"], "answer": "A"}])
    return 2


def synthetic(root: Path, bank: VideoBank) -> int:
    types = ["multiple_choice", "boolean", "temporal_grounding", "open_ended", "regression"]
    generate_synthetic(root, 2, seed=0, types=types, size=SIZE, fps=FPS, seconds=2.0, progress=False)
    return len(types)  # one val row per type


def jsonl(root: Path, bank: VideoBank) -> int:
    bank.put(root / "media" / "a.mp4")
    _jsonl(root / "mine.jsonl", [
        {"problem_id": "j1", "problem": "<video>\nHow many squares?", "answer": "1",
         "problem_type": "numerical",
         "videos": ["media/a.mp4"]},
        {"problem_id": "j2", "problem": "When is the square visible?", "answer": [0.0, 2.0],
         "problem_type": "temporal grounding", "videos": ["media/a.mp4"]},
        {"problem_id": "j3", "problem": "What is 2 + 3?", "answer": "5", "problem_type": "math"}])
    return 3


WRITERS = {name: fn for name, fn in globals().items() if callable(fn) and name in (
    "videomme", "videomme_v2", "mvbench", "tempcompass", "motionbench", "lvbench", "longvideobench", "mlvu",
    "video_holmes", "minerva", "vcrbench", "videoreasonbench", "longvideo_reason", "mmvu", "videommmu",
    "videomathqa", "vsibench", "charades_sta", "stvg", "ovobench", "odvbench", "livesports3k_qa", "synthetic",
    "jsonl")}


def write_all(root: Path) -> dict[str, int]:
    """Write every fixture under ``root/<benchmark>``; returns the item count per benchmark."""
    bank = VideoBank(root / "_clips")
    return {name: writer(root / name, bank) for name, writer in WRITERS.items()}


# ---- helpers shared by the eval tests ----------------------------------------------------------

SMALL_VIDEO = {"fps": 2.0, "min_frames": 2, "max_frames": 4, "min_pixels": 28 * 28, "max_pixels": SIZE * SIZE}
SMALL_IMAGE = {"min_pixels": 28 * 28, "max_pixels": SIZE * SIZE}


def perfect_response(item) -> str:
    """A response that is exactly right for ``item`` (what an oracle model would say)."""
    answer = item.answer
    if item.problem_type == "spatial-temporal grounding":
        return "<answer>" + json.dumps(answer) + "</answer>"
    text = answer if isinstance(answer, str) else json.dumps(answer)
    return f"<answer>{text}</answer>"


def wrong_response(item) -> str:
    pt = item.problem_type
    if pt == "multiple choice":
        letters = [o[0] for o in item.options]
        return f"<answer>{next(x for x in letters if x != item.answer)}</answer>"
    if pt == "boolean":
        return "<answer>" + ("no" if item.answer == "yes" else "yes") + "</answer>"
    if pt in ("numerical", "regression", "math"):
        return "<answer>100000</answer>"
    if pt == "temporal grounding":
        return "<answer>[500, 501]</answer>"
    if pt == "spatial-temporal grounding":
        return '<answer>{"time": [500, 501], "boxes": {}}</answer>'
    return "<answer>zebra quantum marmalade</answer>"


def small_config(model: str, benchmarks: dict, out: Path, **overrides):
    """An EvalConfig for tests: tiny frames, greedy 8-token answers, no progress bar."""
    from easyvideor1.eval import EvalConfig
    from easyvideor1.rollout.base import SamplingConfig

    values = dict(model=model, benchmarks=benchmarks, out_dir=out, video=dict(SMALL_VIDEO),
                  image=dict(SMALL_IMAGE),
                  sampling=SamplingConfig(max_tokens=8, temperature=0.0,
                                          seed=0), max_in_flight=8, io_workers=2,
                  progress=False)
    values.update(overrides)
    return EvalConfig(**values)


def load_checked(bench_fixtures, name: str):
    """``(adapter, items)`` of one fixture, checking the adapter loaded every item it holds."""
    from easyvideor1.eval import get_benchmark

    root, counts = bench_fixtures
    bench = get_benchmark(name)
    items = bench.load(root / name)
    assert len(items) == counts[name]
    return bench, items


def eval_cli_command(model: str, benchmarks: str, root: Path, out: Path, *extra: str) -> list[str]:
    """``evr1 eval`` on the fixtures with SMALL_VIDEO's frames and greedy 8-token answers, then ``extra``."""
    return [
        sys.executable, "-m", "easyvideor1.cli.main", "eval", "--model", model, "--benchmarks", benchmarks,
        "--data-root", str(root), "--out", str(out), "--max-in-flight", "2", "--io-workers", "1",
        "--max-tokens", "8", "--fps", "2", "--min-frames", "2", "--max-frames", "4",
        "--min-pixels", str(28 * 28), "--max-pixels", str(SIZE * SIZE), *extra,
    ]
