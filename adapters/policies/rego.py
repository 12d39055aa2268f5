"""Rego policies (``regopy``, the in-process rego-cpp engine).

The call is the ``input`` document (``requester``, ``requester_groups``, ``agent``,
``agent_version``, ``tool``, ``args``, ``run_id``, ``thread_id``, ``source``, ``time``,
``epoch_seconds``, ``hour_utc``, ``weekday_utc``); the policy's answer is the value of
one rule, by default ``data.signoff.decision``: ``"allow"``, ``"ask"`` or ``"deny"``, or an object
``{"decision": ..., "approvers": [...], "deadline_seconds": N, "reason": "..."}``. A rule
left undefined for a call is an error (declare a ``default``), and fails the call closed.
"""

from __future__ import annotations

import json
import re
from typing import Any

import regopy  # type: ignore[import-untyped]

from adapters.policies._file import FilePolicy, PolicyFile
from runtime import Permission
from runtime.edges import PolicyAnswer, PolicyCall, PolicyError, parse_answer

DEFAULT_QUERY = "data.signoff.decision"
"""The rule a Rego policy answers with unless the agents file names another."""

_QUERY = re.compile(r"data(\.[A-Za-z_][A-Za-z0-9_]*)+")

# regopy 1.5.2 aborts the process (``free(): invalid size``) inside some time.* built-ins
# (time.weekday, time.clock with a zone ...), depending on the machine: no Python code
# can catch that, so a policy calling any of them is refused before it runs.
_TIME_CALL = re.compile(r"(?<![\w.])time\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(")
_STRINGS_AND_COMMENTS = re.compile(r'"(?:[^"\\\n]|\\.)*"|`[^`]*`|#[^\n]*')


def _code_only(text: str) -> str:
    """`text` without its string literals and comments."""
    return _STRINGS_AND_COMMENTS.sub(" ", text)


class RegoPolicy(FilePolicy[str]):
    """A Rego policy file (see the module's docstring for how it answers)."""

    def __init__(
        self,
        policy_id: str,
        source: PolicyFile,
        version: str | None,
        on_error: Permission,
        timeout: float | None,
        query: str = DEFAULT_QUERY,
    ) -> None:
        if not _QUERY.fullmatch(query):
            raise PolicyError(
                f"a Rego query is a rule's path such as {DEFAULT_QUERY}; got {query!r}"
            )
        self._query = query
        super().__init__(policy_id, source, version, on_error, timeout)

    def compile(self, text: str) -> str:
        """Check the module parses and calls no ``time.*`` built-in (each call evaluates
        it in a fresh interpreter)."""
        self._interpreter(text)
        called = sorted(set(_TIME_CALL.findall(_code_only(text))))
        if called:
            names = ", ".join(f"time.{name}" for name in called)
            raise PolicyError(
                f"Rego policy {self.path} calls {names}: the in-process Rego engine can "
                "abort the whole process in time.* built-ins; use input.time, "
                "input.epoch_seconds, input.hour_utc and input.weekday_utc instead"
            )
        return text

    def _interpreter(self, text: str) -> Any:
        interpreter = regopy.Interpreter()
        try:
            interpreter.add_module(self.path.name, text)
        except Exception as exc:
            raise PolicyError(f"Rego policy {self.path} does not parse: {exc}") from None
        return interpreter

    def decide(self, compiled: str, call: PolicyCall) -> PolicyAnswer:
        """Evaluate the rule with the call as ``input``."""
        try:
            term = json.dumps(call.as_input(), allow_nan=False)
        except ValueError as exc:
            raise PolicyError(f"the call is not valid JSON input for Rego: {exc}") from None
        interpreter = self._interpreter(compiled)
        try:
            # The input as a JSON term, not a regopy Input: rego-cpp owns what it is given,
            # and an Input object freed a second time corrupts the heap.
            interpreter.set_input_term(term)
            output = interpreter.query(self._query)
            ok = output.ok()
            # Read as text: rego-cpp aborts the process on some reads of an undefined
            # result. The output goes before its interpreter.
            text = str(output)
            del output
        except ValueError:
            # regopy parses the engine's answer as JSON; a built-in function that fails
            # leaves an error text instead.
            raise PolicyError("Rego failed: a built-in function gave no value") from None
        except Exception as exc:
            raise PolicyError(f"Rego failed: {exc}") from None
        finally:
            del interpreter
        if not ok:
            raise PolicyError(f"Rego failed: {text.strip()[:500]}")
        if not text.startswith("{"):
            raise PolicyError(f"{self._query} is undefined for this call (declare a default)")
        try:
            found = json.loads(text)["expressions"]
        except (ValueError, KeyError, TypeError):
            raise PolicyError(f"Rego answered something unreadable: {text[:200]}") from None
        if not isinstance(found, list) or len(found) != 1:
            raise PolicyError(f"{self._query} has no single value for this call")
        return parse_answer(found[0])
