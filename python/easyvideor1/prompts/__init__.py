"""Jinja2 prompt templates per problem type and their renderer.

>>> render_prompt({"problem": "<video>How many cubes?", "problem_type": "numerical",
...                "videos": ["a.mp4"]}).splitlines()[0]
'<video>How many cubes?'
"""

from easyvideor1.prompts.renderer import PromptError, PromptRenderer, render_prompt, template_stem

__all__ = ["PromptError", "PromptRenderer", "render_prompt", "template_stem"]
