"""What Cedar and Rego policies share: a file read again when it changes, a version, a
deadline, and evaluation off the event loop."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from runtime import Permission
from runtime.edges import DEFAULT_POLICY_TIMEOUT, PolicyAnswer, PolicyCall, PolicyError

_Compiled = TypeVar("_Compiled")


@dataclass(frozen=True)
class PolicyFile:
    """A policy file on disk.

    Attributes:
        path: Where it is.
    """

    path: Path

    def read(self) -> tuple[tuple[int, int], str]:
        """The file's stamp (modification time, size) and its text.

        Raises:
            PolicyError: It cannot be read.
        """
        try:
            stat = self.path.stat()
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PolicyError(f"policy file {self.path} cannot be read: {exc}") from None
        return (stat.st_mtime_ns, stat.st_size), text

    def stamp(self) -> tuple[int, int]:
        """The file's modification time and size, to tell when it changed.

        Raises:
            PolicyError: It is gone.
        """
        try:
            stat = self.path.stat()
        except OSError as exc:
            raise PolicyError(f"policy file {self.path} cannot be read: {exc}") from None
        return stat.st_mtime_ns, stat.st_size


def digest_version(text: str) -> str:
    """A version naming the file's content: ``sha256:`` and 12 hex digits."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


class FilePolicy(ABC, Generic[_Compiled]):
    """A policy read from a file, compiled once and again whenever the file changes.

    A file that changes into one that does not parse fails every call closed until it is
    fixed. Evaluation runs in a worker thread, so the deadline holds even while an engine
    computes.
    """

    def __init__(
        self,
        policy_id: str,
        source: PolicyFile,
        version: str | None,
        on_error: Permission,
        timeout: float | None,
    ) -> None:
        if on_error is Permission.ALLOW:
            raise PolicyError("a policy's on_error is ask or deny, never allow")
        self._id = policy_id
        self._source = source
        self._fixed_version = version
        self._on_error = on_error
        self._timeout = timeout if timeout is not None else DEFAULT_POLICY_TIMEOUT
        self._lock = threading.Lock()
        stamp, text = source.read()
        self._compiled = self.compile(text)
        self._stamp = stamp
        self._version = version or digest_version(text)

    @property
    def id(self) -> str:
        """The policy's id."""
        return self._id

    @property
    def version(self) -> str:
        """The policy's version: the configured one, else its file's digest."""
        return self._version

    @property
    def on_error(self) -> Permission:
        """What a call gets when the policy fails."""
        return self._on_error

    @property
    def timeout(self) -> float:
        """Seconds the policy has to answer."""
        return self._timeout

    @property
    def path(self) -> Path:
        """The policy's file."""
        return self._source.path

    async def evaluate(self, call: PolicyCall) -> PolicyAnswer:
        """The policy's answer for `call`, read from its file as it is now.

        Raises:
            PolicyError: The file is gone or no longer parses, or the engine failed.
        """
        return await asyncio.to_thread(self.evaluate_now, call)

    def evaluate_now(self, call: PolicyCall) -> PolicyAnswer:
        """`evaluate`, in the calling thread (replays, tests)."""
        with self._lock:
            if self._source.stamp() != self._stamp:
                stamp, text = self._source.read()
                self._compiled = self.compile(text)
                self._stamp = stamp
                if self._fixed_version is None:
                    self._version = digest_version(text)
            compiled = self._compiled
        return self.decide(compiled, call)

    @abstractmethod
    def compile(self, text: str) -> _Compiled:
        """The engine's form of the file's text.

        Raises:
            PolicyError: It does not parse.
        """

    @abstractmethod
    def decide(self, compiled: _Compiled, call: PolicyCall) -> PolicyAnswer:
        """The answer of the compiled policy for `call`.

        Raises:
            PolicyError: The engine failed or answered something else.
        """
