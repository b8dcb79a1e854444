"""Colors shared by the HTML and PNG renderings, so the two pictures read the same."""
from __future__ import annotations

OUTCOME_COLORS = {"hit": "#2e9d4f", "miss": "#f08c2e", "compiled": "#3a6fd8", "error": "#d62828"}
KIND_COLORS = {
    "graph_compile": "#c9d3df", "dynamo": "#8e6cc4", "aot_autograd": "#2a9d8f", "inductor_lowering": "#5b8fb9",
    "kernel_compile": "#3a6fd8", "cache_lookup": "#9ab0c4", "lease_wait": "#e9c46a", "warm_step": "#a8dadc",
    "verify": "#b5838d", "gc": "#9a9a9a",
}
OTHER = "#b0b0b0"
CRITICAL = "#111111"
BY_OUTCOME = ("kernel_compile", "cache_lookup")  # these kinds are colored by outcome, the rest by kind


def color(e: dict) -> str:
    if e.get("outcome") == "error":
        return OUTCOME_COLORS["error"]
    if e["kind"] in BY_OUTCOME and e.get("outcome") in OUTCOME_COLORS:
        return OUTCOME_COLORS[e["outcome"]]
    return KIND_COLORS.get(e["kind"], OTHER)


def segment_color(a_events: list[dict], seg: dict) -> tuple[str, float]:
    """A critical-path segment's fill and opacity: its event's color, paler for self time."""
    if seg["idx"] is None:
        return UNTRACKED, 1.0
    return color(a_events[seg["idx"]]), (0.45 if seg["self"] else 1.0)


UNTRACKED = "#e3e6ea"
