"""signoff-client (deploy/client): the client and its framework adapters as a wheel of
their own, which depends on httpx, PyJWT and rfc8785 only and runs without the server."""

from __future__ import annotations

import email.parser
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path

from tests.clients.serving import ROOT

PACKAGE = ROOT / "deploy" / "client"
BLOCKED = ("runtime", "bot", "sqlalchemy", "aiohttp", "alembic", "aiosqlite", "asyncpg")


def build_wheel(tmp_path: Path) -> Path:
    """The wheel of deploy/client's pyproject, built outside the checkout."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "pyproject.toml").write_bytes((PACKAGE / "pyproject.toml").read_bytes())
    (source / "adapters").symlink_to(ROOT / "adapters", target_is_directory=True)
    out = tmp_path / "wheels"
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--quiet",
            "--wheel-dir",
            str(out),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    [wheel] = out.glob("signoff_client-*.whl")
    return wheel


def test_the_checkout_links_the_package_it_ships() -> None:
    assert (PACKAGE / "adapters").is_symlink()
    assert (PACKAGE / "adapters").resolve() == (ROOT / "adapters").resolve()


def test_the_wheel_holds_the_client_alone_and_needs_only_its_three_libraries(
    tmp_path: Path,
) -> None:
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as opened:
        names = opened.namelist()
        [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = email.parser.Parser().parsestr(opened.read(metadata).decode())

    code = {n for n in names if ".dist-info/" not in n}
    expected = {"adapters/__init__.py"} | {
        f"adapters/client/{path.name}" for path in (ROOT / "adapters" / "client").glob("*.py")
    }
    assert code == expected
    required = {r for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    # The same as signoff's own `client` extra.
    assert required == set(project["optional-dependencies"]["client"])
    assert set(meta.get_all("Provides-Extra") or []) == {
        "openai-agents",
        "langgraph",
        "pydantic-ai",
    }


def test_the_installed_wheel_imports_without_the_server(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as opened:
        opened.extractall(site)
    program = textwrap.dedent(
        f"""
        import sys

        class Refuse:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {BLOCKED!r}:
                    raise ImportError(f"the client must not import {{name}}")
                return None

        sys.meta_path.insert(0, Refuse())
        import adapters.client
        from adapters.client import AsyncSignoffClient, SignoffClient, verify_decision_token
        print(adapters.client.__file__)
        """
    )
    ran = subprocess.run(
        [sys.executable, "-c", program],
        cwd=tmp_path,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert Path(ran.stdout.strip()).is_relative_to(site)
