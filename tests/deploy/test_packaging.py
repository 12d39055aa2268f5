"""The wheel and the sdist hold what an installed signoff needs, and the wheel serves.

Both are built from a copy of the working tree (what git tracks or would track), so the
build leaves nothing behind in the checkout: the wheel with ``pip wheel --no-deps
--no-build-isolation`` (setuptools comes with the dev extra), the sdist with setuptools'
own build hook. The wheel is then installed with only the ``postgres`` extra into a new
virtual environment (its dependencies from the package index, as a user would get them),
and its ``signoff serve`` is run until ``/readyz`` answers ready, then stopped with
SIGTERM. On PostgreSQL when ``SIGNOFF_TEST_POSTGRES_URL`` is set, else on SQLite.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pgtest import fresh_database, postgres_url

ROOT = Path(__file__).resolve().parents[2]
VERSION = "0.1.0"

pytestmark = pytest.mark.timeout(300)

PIP_WHEEL = [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "-q"]
PIP_INSTALL = ["-m", "pip", "install", "--quiet", "--disable-pip-version-check"]


def packaged_data(tree: Path) -> set[str]:
    """The files besides Python modules an installed signoff reads, relative to `tree`."""
    wanted = [
        "runtime/py.typed",
        "runtime/store/migrations/script.py.mako",
        *(
            f"runtime/store/migrations/versions/{p.name}"
            for p in _in(tree, "runtime/store/migrations/versions", "*.py")
        ),
        *(
            f"adapters/web/templates/{p.name}"
            for p in _in(tree, "adapters/web/templates", "*.html")
        ),
        "examples/mcp/agents.toml",
    ]
    return set(wanted)


def _in(tree: Path, folder: str, pattern: str) -> list[Path]:
    return sorted((tree / folder).glob(pattern))


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the working tree: what git tracks, and new files it does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    tree = tmp_path_factory.mktemp("source")
    for name in filter(None, listed.split("\0")):
        origin = ROOT / name
        if origin.is_file():  # a tracked file deleted in the work tree is skipped
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, tree / name)
    return tree


@pytest.fixture(scope="module")
def dist(source: Path) -> Path:
    """The wheel and the sdist, built from `source`."""
    out = source.parent / "dist"
    out.mkdir()
    subprocess.run(
        [*PIP_WHEEL, "--wheel-dir", str(out)],
        cwd=source,
        check=True,
        timeout=120,
    )
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from setuptools import build_meta; build_meta.build_sdist(sys.argv[1])",
            str(out),
        ],
        cwd=source,
        check=True,
        capture_output=True,
        timeout=120,
    )
    return out


def test_the_wheel_holds_the_migrations_templates_and_py_typed(source: Path, dist: Path) -> None:
    wheel = dist / f"signoff-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = archive.read(f"signoff-{VERSION}.dist-info/entry_points.txt").decode()

    assert packaged_data(source) <= names, sorted(packaged_data(source) - names)
    assert "runtime/store/migrations/env.py" in names
    assert {name.split("/", 1)[0] for name in names} == {
        "runtime",
        "adapters",
        "bot",
        "examples",
        f"signoff-{VERSION}.dist-info",
    }
    assert not [name for name in names if "/tests/" in f"/{name}" or "__pycache__" in name]
    assert "signoff = bot.__main__:main" in entry_points


def test_the_sdist_holds_the_sources_and_no_tests(source: Path, dist: Path) -> None:
    sdist = dist / f"signoff-{VERSION}.tar.gz"
    prefix = f"signoff-{VERSION}/"
    with tarfile.open(sdist) as archive:
        names = {member.name.removeprefix(prefix) for member in archive.getmembers()}

    assert packaged_data(source) <= names, sorted(packaged_data(source) - names)
    assert {"pyproject.toml", "README.md", "PKG-INFO", "bot/__main__.py"} <= names
    assert not [name for name in names if name.startswith(("tests/", "deploy/", "docs/"))]
    assert not [name for name in names if "__pycache__" in name]


@pytest.fixture(scope="module")
def installed(dist: Path) -> Iterator[Path]:
    """A new virtual environment with the wheel and its ``postgres`` extra."""
    venv = dist.parent / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    wheel = dist / f"signoff-{VERSION}-py3-none-any.whl"
    done = subprocess.run(
        [str(venv / "bin" / "python"), *PIP_INSTALL, f"signoff[postgres] @ {wheel.as_uri()}"],
        env=_clean_environment(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, f"installing the wheel failed:\n{done.stderr[-3000:]}"
    yield venv


def _clean_environment() -> dict[str, str]:
    """This environment without signoff's settings or a path back into the checkout."""
    return {
        name: value
        for name, value in os.environ.items()
        if not name.upper().startswith(("SIGNOFF_", "PYTHON", "VIRTUAL_ENV"))
    }


def test_the_installed_package_is_the_wheel_s(installed: Path, tmp_path: Path) -> None:
    found = subprocess.run(
        [
            str(installed / "bin" / "python"),
            "-c",
            "import asyncpg, runtime; print(runtime.__file__)",
        ],
        cwd=tmp_path,
        env=_clean_environment(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()

    assert Path(found).is_relative_to(installed), found


@asynccontextmanager
async def database(tmp_path: Path) -> AsyncIterator[str]:
    """A fresh PostgreSQL database when the tests have a cluster, else a SQLite file."""
    if postgres_url() is None:
        yield f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}"
        return
    async with fresh_database(migrated=False) as url:
        yield url


async def test_the_installed_signoff_serves_until_ready(installed: Path, tmp_path: Path) -> None:
    async with database(tmp_path) as url:
        env = {
            **_clean_environment(),
            "SIGNOFF_DATABASE_URL": url,
            "SIGNOFF_PORT": "0",
            "SIGNOFF_OPERATOR_TOKEN": "packaging-operator-token-0123456789",
            "SIGNOFF_COOKIE_SECRET": "packaging-cookie-secret-0123456789-abcdef",
            "SIGNOFF_SHUTDOWN_GRACE_SECONDS": "2",
        }
        errors = tmp_path / "stderr.txt"
        process = _start(installed, tmp_path, env, errors)
        try:
            base = await asyncio.wait_for(
                asyncio.to_thread(_serving_at, process, errors), timeout=90
            )
            async with aiohttp.ClientSession() as http:
                ready = await _until_ready(http, base)
            assert ready["status"] == "ready", ready
            process.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(process.wait, 30)
            assert code == 0, f"signoff serve exited with {code}:\n{errors.read_text()[-3000:]}"
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
            assert process.stdout is not None
            process.stdout.close()


def _start(
    installed: Path, where: Path, env: dict[str, str], errors: Path
) -> subprocess.Popen[str]:
    with errors.open("w") as stderr:
        return subprocess.Popen(
            [str(installed / "bin" / "signoff"), "serve"],
            cwd=where,
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )


def _serving_at(process: subprocess.Popen[str], errors: Path) -> str:
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("signoff serving at "):
            return line.split("signoff serving at ", 1)[1].strip()
    raise AssertionError(f"signoff serve did not start:\n{errors.read_text()[-3000:]}")


async def _until_ready(http: aiohttp.ClientSession, base: str) -> dict[str, Any]:
    # Serving comes before ready only while the first checks run: ask until it says so.
    body: object = None
    for _ in range(200):
        async with http.get(f"{base}/readyz") as answer:
            body = await answer.json()
            if answer.status == 200:
                assert isinstance(body, dict), body
                return body
        await asyncio.sleep(0.05)
    raise AssertionError(f"/readyz never answered ready: {body}")
