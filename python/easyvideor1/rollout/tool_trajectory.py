"""The offline (mix-policy) tool-using trajectory of the data format, as a
:class:`~easyvideor1.models.trajectory.Trajectory`.

An offline tool-using trajectory (docs/data-format.md, "Offline tool-using trajectories") is the
``offline_output`` string with its tool calls inline: each policy turn ends right after a call's
closing tag (the kit's ``stop_strings``, where a sampled turn stops too), the kit runs each call
again, so the tool turns carry real frames from the frame store, and the text after the last
call is the final answer. The trajectory is grown with the rollout's own
:class:`~easyvideor1.models.trajectory.TrajectoryBuilder`, so its ids, positions and masks are
laid out exactly as a sampled one's: loss 1 on the policy turns, 0 on the tool turns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from easyvideor1.algos.mix_policy import encode_offline_response
from easyvideor1.models.inputs import PromptBuilder, PromptInputs
from easyvideor1.models.trajectory import Trajectory, TrajectoryBuilder
from easyvideor1.rollout.base import RolloutError

if TYPE_CHECKING:
    from easyvideor1.rollout.tools.base import ToolKit, ToolVideo


def split_policy_turns(text: str, stop_strings: Sequence[str]) -> list[str]:
    """``text`` cut right after every tool call's closing tag; the last piece is the final turn."""
    turns, rest = [], text
    while True:
        ends = [(rest.find(stop), stop) for stop in stop_strings if stop and stop in rest]
        if not ends:
            break
        at, stop = min(ends)
        turns.append(rest[:at + len(stop)])
        rest = rest[at + len(stop):]
    turns.append(rest)
    return turns


def offline_tool_trajectory(text: str, prompt: PromptInputs, builder: PromptBuilder, kit: ToolKit,
                            video: ToolVideo, *, eos_token_id: int, max_response_length: int) -> Trajectory | None:
    """The offline response as a multi-turn trajectory, its calls run again by ``kit``; None when
    it makes no call (then it is the plain single-turn offline response).

    The answer turn is cut to what is left of ``max_response_length`` (EOS kept), as a
    single-turn offline response is; turns before it are never cut (a cut tool turn would split
    a vision block), so a trajectory too long for them is refused with the reason."""
    turns = split_policy_turns(text, kit.stop_strings)
    if len(turns) == 1:
        return None
    where = f"sample {prompt.sample_id!r}: the offline trajectory"
    if not turns[-1].strip():
        raise RolloutError(f"{where} ends with a tool call; the text after its last call must be the answer")

    def encode(part: str) -> list[int]:
        with builder.lock:
            return builder.tokenizer.encode(part, add_special_tokens=False)

    session = kit.session(video)
    out = TrajectoryBuilder(builder, prompt)
    for index, turn in enumerate(turns[:-1]):
        out.add_policy(encode(turn), text=turn)
        outcome = session.run(turn)
        if outcome is None:
            raise RolloutError(f"{where}: turn {index} ends with a call's closing tag but the kit finds no call in it")
        segment = out.tool_segment(kit.tool_turn_text(outcome), outcome.videos, outcome.images)
        out.add_tool(segment, refs=outcome.refs, error=outcome.error is not None)
    room = max_response_length - len(out)
    if room < 2:
        raise RolloutError(f"{where} has {len(out)} tokens before its answer, which leaves no room in "
                           f"data.max_response_length={max_response_length}")
    answer = encode_offline_response(turns[-1], encode, eos_token_id=eos_token_id, max_response_length=room)
    out.add_policy(answer, text=turns[-1])
    return out.trajectory()
