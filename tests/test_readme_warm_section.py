"""The README's warm section is short steps a newcomer can scan (issue 32), not one long paragraph;
its commands are the ones the warm tests run."""
from __future__ import annotations

import re

import readme_commands as rc

TITLE = "Warm the cache before the GPU job is scheduled"


def test_warm_section_is_numbered_short_steps() -> None:
    text = rc.section(TITLE)
    steps = re.findall(r"^(\d+)\. \*\*", text, re.M)
    assert steps == [str(i) for i in range(1, len(steps) + 1)] and len(steps) >= 4, steps
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    for para in re.split(r"\n\s*\n|\n(?=- |\d+\. )", prose):  # a paragraph, a bullet or a step
        assert len(para.strip().splitlines()) <= 12, f"a paragraph of {len(para.splitlines())} lines:\n{para[:300]}"


def test_warm_section_keeps_the_warm_commands() -> None:
    cmds = [c for block in rc.bash_blocks(TITLE) for c in block]
    assert any(c.startswith("pcompile warm train.py --target h100") for c in cmds), cmds
    assert any(c.startswith("pcompile warm --check") for c in cmds), cmds
