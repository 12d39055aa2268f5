"""The client installs without the server: importing it needs nothing of signoff's core."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.clients.serving import ROOT

BLOCKED = ("runtime", "bot", "sqlalchemy", "aiohttp", "alembic", "aiosqlite", "asyncpg")


def _import_with_blocked(statement: str) -> subprocess.CompletedProcess[str]:
    program = textwrap.dedent(
        f"""
        import sys

        class Refuse:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {BLOCKED!r}:
                    raise ImportError(f"the client must not import {{name}}")
                return None

        sys.meta_path.insert(0, Refuse())
        """
    )
    program += statement + "\n"
    program += (
        f"print('imported', sorted(m for m in sys.modules if m.split('.')[0] in {BLOCKED!r}))"
    )
    return subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_the_client_imports_without_the_server_dependencies() -> None:
    done = _import_with_blocked(
        "import adapters.client\n"
        "from adapters.client import SignoffClient, AsyncSignoffClient, gate, "
        "verify_decision_token, derive_key"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "imported []"


def test_the_blocker_does_refuse_the_core() -> None:
    done = _import_with_blocked("import runtime")
    assert done.returncode != 0
    assert "the client must not import runtime" in done.stderr
