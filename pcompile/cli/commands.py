"""The CLI's commands, one module each; a module registers its own parser."""
from __future__ import annotations

COMMAND_MODULES: list[str] = [
    "warm_cmd",
    "profile_cmd",
    "stats_cmd",
    "verify_cmd",
    "keygen_cmd",
    "gc_cmd",
    "explain_cmd",
    "pin_cmd",
    "report_cmd",
    "clear_cmd",
    "config_cmd",
]
