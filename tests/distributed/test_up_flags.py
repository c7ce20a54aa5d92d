"""`evr1 up`'s flags (#29 item 8): each one that overrides a run-config field carries that field's
name (prefixed by its service where sections share it) and says which field; the older spellings
still work; KEY=VALUE overrides reach the cluster's run config."""

from __future__ import annotations

import re

from easyvideor1.cli.main import build_parser
from easyvideor1.config.cli import config_from_args, field_info


def _up_actions():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command" or getattr(a, "choices", None) and "up" in a.choices)
    return sub.choices["up"]


def test_each_field_flag_carries_its_fields_name():
    up = _up_actions()
    checked = 0
    for action in up._actions:
        named = re.search(r"(?:config )?((?:worker|serve|distributed|data)\.[a-z_.]+)", action.help or "")
        if not named or not action.option_strings:
            continue
        field = named.group(1).rstrip(".")
        field_info(field)  # a real field
        flag = action.option_strings[0].removeprefix("--").replace("-", "_")
        section, last = field.split(".")[-2:]
        assert flag == last or flag == f"{section}_{last}", (action.option_strings, field)
        checked += 1
    assert checked >= 10


def test_older_spellings_and_overrides_still_parse(tmp_path):
    up = _up_actions()
    args = up.parse_args(["--model", "M", "--visibility-timeout", "7", "--rollout-port", "9",
                          "serve.rollout.batch_size=3"])
    assert (args.model, args.visibility_timeout, args.rollout_port) == ("M", 7.0, 9)
    new = up.parse_args(["--model-path", "M", "--visibility-timeout-s", "7", "--rollout-http-port", "9"])
    assert (new.model, new.visibility_timeout, new.rollout_port) == ("M", 7.0, 9)
    assert config_from_args(args).serve.rollout.batch_size == 3
