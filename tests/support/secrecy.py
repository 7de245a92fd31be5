"""Secrets to search for, and every text a cache, an error or a log record shows."""

from __future__ import annotations

import logging
import secrets
import traceback

SECRET = "Pw-" + secrets.token_hex(12)
WRONG_SECRET = "Wrong-" + secrets.token_hex(12)


def all_text_of(error: BaseException) -> str:
    """Return everything an error shows: str, repr, args, and the formatted chain."""
    return "\n".join(
        [str(error), repr(error), repr(error.args), "".join(traceback.format_exception(error))]
    )


def all_log_text(records: list[logging.LogRecord]) -> str:
    """Return the log records as a handler would write them, with their arguments."""
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    return "\n".join(formatter.format(record) + repr(record.args) for record in records)


def assert_no_secret(text: str) -> None:
    """Assert that neither SECRET nor WRONG_SECRET appears in `text`."""
    assert SECRET not in text, text
    assert WRONG_SECRET not in text, text
