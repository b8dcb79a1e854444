"""One-line warnings on stderr for users who configured no logging (most training scripts)."""
from __future__ import annotations

import logging

_done = False


def setup() -> None:
    global _done
    if _done:
        return
    _done = True
    logger = logging.getLogger("pcompile")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("pcompile: %(levelname)s: %(message)s"))
        handler.setLevel(logging.WARNING)
        logger.addHandler(handler)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)
