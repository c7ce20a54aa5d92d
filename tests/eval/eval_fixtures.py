"""Tiny fixtures for every benchmark adapter, written in each benchmark's own annotation format.

Videos are small real H.264 files (``write_video``); each fixture function writes its
annotation files under ``root`` exactly as the benchmark ships them (JSON/JSONL exports
where the release is parquet) and returns the number of items the adapter must load.
"""

from __future__ import annotations

import json
import os
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
    rows = []
    for i, (duration, task) in enumerate([("short", "Counting Problem"), ("medium", "Action Reasoning"),
                                          ("long", "Counting Problem")]):
        vid = f"vid{i}"
        bank.put(root / "data" / f"{vid}.mp4")
        rows.append({"video_id": f"00{i}", "duration": duration, "domain": "Knowledge",
                     "sub_category": "Humanity",
                     "url": f"https://www.youtube.com/watch?v={vid}", "videoID": vid,
                     "question_id": f"00{i}-1",
                     "task_type": task, "question": f"What happens in clip {i}?",
                     "options": ["A. a square moves", "B. nothing", "C. a circle spins", "D. it rains"],
                     "answer": "ABC"[i]})
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
    bank.put(root / "videos" / "1001.mp4")
    bank.put(root / "videos" / "1002.mp4")
    _json(root / "questions" / "multi-choice.json", {
        "1001": {"direction": [{"question": "Where is the square going?\nA. left\nB. right\nC. up",
                                "answer": "B. right"}]},
        "1002": {"speed": [{"question": "How fast does it move?\nA. slowly\nB. quickly",
                            "answer": "A. slowly"}]}})
    _json(root / "questions" / "yes_no.json", {
        "1001": {"direction": [{"question": "Is the square moving right?", "answer": "yes"},
                               {"question": "Is the square moving left?", "answer": "no"}]}})
    _json(root / "questions" / "caption_matching.json", {
        "1002": {"order": [{"question": "Which caption matches the video?\nCaption A: a square moves right\n"
                                        "Caption B: a square moves left",
                            "answer": "Caption A: a square moves right"}]}})
    _json(root / "questions" / "captioning.json", {
        "1001": {"direction": [{"question": "Describe the movement in the video.",
                                "answer": "a square moves to the right"}]}})
    return 6


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
    return 1


def mlvu(root: Path, bank: VideoBank) -> int:
    bank.put(root / "video" / "1_plotQA" / "p1.mp4")
    bank.put(root / "video" / "4_count" / "c1.mp4")
    bank.put(root / "video" / "9_summary" / "s1.mp4")
    _json(root / "json" / "1_plotQA.json", [{"video": "p1.mp4", "duration": 2, "question": "What is drawn?",
                                              "candidates": ["a square", "a tree"], "answer": "a square",
                                              "question_type": "plotQA"}])
    _json(root / "json" / "4_count.json", [{"video": "c1.mp4", "duration": 2, "question": "How many squares?",
                                             "candidates": ["1", "2",
                                                            "3"], "answer": "1", "question_type": "count"}])
    _json(root / "json" / "9_summary.json", [{"video": "s1.mp4", "duration": 2,
                                              "question": "Summarize the video.",
                                               "answer": "a coloured square slides across a black screen",
                                               "question_type": "summary"}])
    return 3


def video_holmes(root: Path, bank: VideoBank) -> int:
    bank.put(root / "videos_cropped" / "h1.mp4")
    _json(root / "test_Video-Holmes.json", [
        {"video ID": "h1", "Question ID": "h1_1", "Question Type": "SR",
         "Question": "Why does the square move?",
         "Options": {"A": "it is pushed", "B": "it is chasing", "C": "wind", "D": "gravity"}, "Answer": "B",
         "Explanation": "..."},
        {"video ID": "h1", "Question ID": "h1_2", "Question Type": "TCI", "Question": "What happens next?",
         "Options": {"A": "it stops", "B": "it grows", "C": "it splits", "D": "it fades"}, "Answer": "A"}])
    return 2


def minerva(root: Path, bank: VideoBank) -> int:
    bank.put(root / "videos" / "yt1.mp4")
    _json(root / "minerva.json", [
        {"key": "k1", "video_id": "yt1", "question": "How many times does the square cross the centre?",
         "answer": "twice", "answer_id": 1, "answer_choice_0": "once", "answer_choice_1": "twice",
         "answer_choice_2": "never", "answer_choice_3": "three times", "answer_choice_4": "four times",
         "reasoning": "...", "question_type": "Counting", "split": "test", "category": "Short Films"}])
    return 1


def vcrbench(root: Path, bank: VideoBank) -> int:
    # v1/videos/meta_info_video.json; video_path is relative to the annotation's folder.
    base = root / "v1" / "videos"
    bank.put(base / "video" / "src" / "v1.mp4")
    empty = {"A": "", "B": "", "C": "", "D": ""}
    rows = [
        {"id": 0, "video_path": "video/src/v1.mp4", "duration": 2, "dimension": "Fundamental Temporal Reasoning",
         "question": "Which direction does the square move?A. left\nB. right\nC. up\nD. down\n",
         "multiple-choice": True, "choices": {"A": "left", "B": "right", "C": "up", "D": "down"}, "answer": "B",
         "reasoning": ["1. 0:00-0:02, the square slides to the right."]},
        {"id": 1, "video_path": "video/src/v1.mp4", "duration": 2, "dimension": "Video Temporal Counting",
         "question": "How many squares are there?", "multiple-choice": False, "choices": empty, "answer": "1",
         "reasoning": ["1. One square is visible throughout."]},
        {"id": 2, "video_path": "video/src/v1.mp4", "duration": 2, "dimension": "Video Temporal Grounding",
         "question": "When is the square moving?", "multiple-choice": False, "choices": empty,
         "answer": "[0, 2]", "reasoning": ["1. It moves from 0:00 to 0:02."]}]
    _json(base / "meta_info_video.json", rows)
    return 3


def videoreasonbench(root: Path, bank: VideoBank) -> int:
    # questions/<demo>.json: an object keyed by question id (the repo's layout).
    bank.put(root / "videos" / "hrd" / "state4_op5_start.mp4")
    tail = " Provide a summary of the final answer after 'Final Answer:'"
    common = {"video": "videos/hrd/state4_op5_start.mp4", "visible_time": "start", "num_state": 4,
              "num_operation": 5, "moves": ["right", "right"], "states": [[[1, 0], [2, 3]]]}
    _json(root / "questions" / "hrd.json", {
        "state4_op5_order_operation_start": dict(common, question="What is the 2nd move of the tile?" + tail,
                                                 answer="right", dim="order_operation"),
        "state4_op5_order_state_start": dict(common, question="Which moves were made, in order?" + tail,
                                             answer="right then right", dim="order_state")})
    return 2


def longvideo_reason(root: Path, bank: VideoBank) -> int:
    # test.jsonl: options embedded in "problem"; the archives extract into longvideo_eval_subset<N>/.
    bank.put(root / "longvila_videos" / "lr1.mp4")
    bank.put(root / "longvideo_eval_subset3" / "lr2.mp4")
    _jsonl(root / "test.jsonl", [
        {"problem_id": 0, "problem": "Why does the square move?\nA. to escape\nB. to play\nC. to eat\nD. no reason",
         "data_type": "video", "problem_type": "goal", "reasoning": "...", "videos": "longvila_videos/lr1.mp4",
         "answer": "<answer>A</answer>"},
        {"problem_id": 1, "problem": "Which way does it move first?\nA. left\nB. right\nC. up\nD. down",
         "data_type": "video", "problem_type": "temporal", "reasoning": "...", "videos": "longvila_videos/lr2.mp4",
         "answer": "<answer>B</answer>"}])
    return 2


def mmvu(root: Path, bank: VideoBank) -> int:
    bank.put(root / "videos" / "Physics" / "0.mp4")
    _json(root / "validation.json", [
        {"id": "mc-1", "video": "https://example.org/datasets/MMVU/resolve/main/videos/Physics/0.mp4",
         "question": "What force acts on the square?", "choices": {"A": "none", "B": "friction",
                                                                   "C": "gravity",
                                                                    "D": "tension", "E": "magnetic"},
         "answer": "A", "question_type": "multiple-choice", "metadata": {"subject": "Physics"}},
        {"id": "oe-1", "video": "https://example.org/datasets/MMVU/resolve/main/videos/Physics/0.mp4",
         "question": "What shape moves?", "choices": {}, "answer": "a square", "question_type": "open-ended",
         "metadata": {"subject": "Physics"}}])
    return 2


def videommmu(root: Path, bank: VideoBank) -> int:
    bank.put(root / "videos" / "Perception" / "validation_Physics_1.mp4")
    bank.put(root / "videos" / "Adaptation" / "validation_Math_2.mp4")
    _jsonl(root / "Perception.jsonl", [{"id": "validation_Physics_1", "question": "What is shown?",
                                        "options": ["a square", "a circle", "a line"], "answer": "A",
                                        "question_type": "multiple-choice"}])
    _jsonl(root / "Adaptation.jsonl", [{"id": "validation_Math_2", "question": "What is 2 + 2?",
                                        "options": [],
                                        "answer": "4", "question_type": "open"}])
    return 2


def videomathqa(root: Path, bank: VideoBank) -> int:
    # The two parquet files (mcq, multi_binary) exported to JSONL; the release has five options.
    bank.put(root / "videos" / "mq1.mp4")
    common = {"videoID": "mq1", "question_id": 7, "category": "Geometry Area", "length": "short",
              "question": "What is the area of the square (cm^2)?", "steps": '{"1": "Read the side: 4 cm."}'}
    _jsonl(root / "videomathqa_mcq_test.jsonl", [dict(common, options=["(A) 4", "(B) 8", "(C) 16"], answer="C")])
    _jsonl(root / "videomathqa_mbin_test.jsonl", [dict(common, options=["(A) 16", "(B) 4"], answer="A"),
                                                  dict(common, options=["(A) 8", "(B) 16"], answer="B")])
    return 3  # one MCQ row + two multi-binary rows


def vsibench(root: Path, bank: VideoBank) -> int:
    bank.put(root / "scannet" / "scene0001_00.mp4")
    bank.put(root / "arkitscenes" / "41069025.mp4")
    _jsonl(root / "test.jsonl", [
        {"id": 1, "dataset": "scannet", "scene_name": "scene0001_00", "question_type": "object_counting",
         "question": "How many chairs are in the room?", "options": None, "ground_truth": "4"},
        {"id": 2, "dataset": "arkitscenes", "scene_name": "41069025",
         "question_type": "object_rel_direction_easy",
         "question": "Is the lamp left or right of the bed?", "options": ["A. left",
                                                                          "B. right"], "ground_truth": "B"},
        {"id": 3, "dataset": "arkitscenes", "scene_name": "41069025",
         "question_type": "object_rel_direction_hard",
         "question": "Is the door front-left or back-right?", "options": ["A. front-left", "B. back-right"],
         "ground_truth": "A"}])
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
    for name in ("0", "1", "2_0", "2_1", "3_0"):
        bank.put(root / "chunked_videos" / f"{name}.mp4")
    _json(root / "ovo_bench_new.json", [
        {"id": 0, "task": "EPM", "video": "src/a.mp4", "realtime": 1.5, "question": "Where was the key?",
         "options": ["table", "drawer", "bag", "floor"], "gt": 1},
        {"id": 1, "task": "OCR", "video": "src/b.mp4", "realtime": 1.0, "question": "What text is shown?",
         "options": ["STOP", "GO", "EXIT", "OPEN"], "gt": 0},
        {"id": 2, "task": "REC", "video": "src/c.mp4", "activity": "jumping jacks",
         "test_info": [{"realtime": 1.0, "count": 1}, {"realtime": 2.0, "count": 2}]},
        {"id": 3, "task": "CRR", "video": "src/d.mp4", "question": "What colour is the car?",
         "test_info": [{"realtime": 1.0, "type": 0}]}])
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
