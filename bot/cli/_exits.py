"""The command line's exit codes, and which runtime error becomes which code."""

from __future__ import annotations

from runtime import (
    ConfigurationError,
    Expired,
    GrantNotActive,
    InvalidAnswer,
    NotAwaiting,
    ResolutionError,
    RunNotFound,
    SignoffError,
    StaleTicket,
    StorageError,
    Unauthorized,
    UnknownExecutionKey,
    UnknownGrant,
)

EXIT_OK = 0


EXIT_INTERNAL = 1


EXIT_USAGE = 2


EXIT_CONFIG = 3


EXIT_NOT_FOUND = 4


EXIT_NOT_AWAITING = 5


EXIT_EXPIRED = 6


EXIT_UNAUTHORIZED = 7


EXIT_STALE = 8


EXIT_BAD_ANSWER = 9


EXIT_STORAGE = 10


EXIT_RUN_FAILED = 11


EXIT_INTERRUPTED = 130


EXIT_CODES: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_INTERNAL: "unexpected internal error (a bug: please report it)",
    EXIT_USAGE: "bad command line: unknown option, missing argument, invalid JSON, no "
    "answer at a prompt (end of standard input)",
    EXIT_CONFIG: "configuration error: an invalid SIGNOFF_* setting or SIGNOFF_APP",
    EXIT_NOT_FOUND: "no such run, ticket, execution key or grant",
    EXIT_NOT_AWAITING: "nothing to decide: the ticket was already decided, voided or the run "
    "cannot do that now (or the grant was already revoked or expired)",
    EXIT_EXPIRED: "the ticket's decision deadline has passed",
    EXIT_UNAUTHORIZED: "the acting user may not decide this ticket or control this run",
    EXIT_STALE: "the agent or its tools changed since the run parked",
    EXIT_BAD_ANSWER: "the answer does not fit the ticket (or fails its input schema)",
    EXIT_STORAGE: "the database failed",
    EXIT_RUN_FAILED: "signoff demo: the run failed (its model or a tool failed)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
}


# Most specific first: the first matching class decides the code and the label.
ERROR_MAP: tuple[tuple[type[BaseException], int, str], ...] = (
    (InvalidAnswer, EXIT_BAD_ANSWER, "invalid answer"),
    (ResolutionError, EXIT_BAD_ANSWER, "answer does not fit"),
    (UnknownExecutionKey, EXIT_NOT_FOUND, "not found"),
    (RunNotFound, EXIT_NOT_FOUND, "not found"),
    (UnknownGrant, EXIT_NOT_FOUND, "not found"),
    (GrantNotActive, EXIT_NOT_AWAITING, "conflict"),
    (NotAwaiting, EXIT_NOT_AWAITING, "conflict"),
    (Expired, EXIT_EXPIRED, "expired"),
    (Unauthorized, EXIT_UNAUTHORIZED, "not allowed"),
    (StaleTicket, EXIT_STALE, "stale ticket"),
    (ConfigurationError, EXIT_CONFIG, "configuration"),
    (StorageError, EXIT_STORAGE, "database"),
    (SignoffError, EXIT_INTERNAL, "error"),
)


HINTS: dict[type[BaseException], str] = {
    StaleTicket: "the run parked under another agent definition; check SIGNOFF_APP, "
    "SIGNOFF_AGENTS and its MCP servers",
}
