"""The deploy kit parses, and names only commands, settings, routes and ports that exist.

Docker, Kubernetes and systemd do not run here: these checks read the files (YAML,
Dockerfile instructions, unit files) and hold what they name against the product: the
`signoff` commands, the `SIGNOFF_*` settings (and the ``*_FILE`` variants of secrets),
the health routes and the port the server is told to use.
"""

from __future__ import annotations

import configparser
import re
import shlex
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.cli import cli
from bot.settings import FILE_SUFFIX, SECRET_FILE_SETTINGS, Settings, env_name

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SETTINGS = {env_name(field) for field in Settings.model_fields}
FILE_SETTINGS = {env_name(field) + FILE_SUFFIX for field in SECRET_FILE_SETTINGS}
COMMANDS = set(cli.commands)
HEALTH_ROUTES = {"/healthz", "/readyz", "/metrics"}


def check_variable(name: str, where: str) -> None:
    assert name in SETTINGS | FILE_SETTINGS, f"{where}: {name} is not a signoff setting"


def check_environment(env: dict[str, str], where: str) -> None:
    for name in env:
        if name.startswith("SIGNOFF_"):
            check_variable(name, where)
    for name in env:
        if name.endswith(FILE_SUFFIX) and name.removesuffix(FILE_SUFFIX) in env:
            pytest.fail(f"{where}: sets both {name.removesuffix(FILE_SUFFIX)} and {name}")


def check_command(argv: list[str], where: str) -> None:
    assert argv, f"{where}: no command"
    assert argv[0] in COMMANDS, f"{where}: `signoff {argv[0]}` is not a command"


# --- Dockerfile ---------------------------------------------------------------------------


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined."""
    text = (DEPLOY / "Dockerfile").read_text()
    joined = re.sub(r"\\\n\s*", " ", text)
    found = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        found.append((instruction.upper(), rest.strip()))
    return found


def docker_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction, rest in dockerfile():
        if instruction == "ENV":
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                env[key] = value
    return env


def test_dockerfile() -> None:
    steps = dockerfile()
    known = {"FROM", "WORKDIR", "COPY", "RUN", "USER", "ENV", "EXPOSE", "HEALTHCHECK"}
    known |= {"ENTRYPOINT", "CMD", "ARG", "LABEL"}
    assert {i for i, _ in steps} <= known
    images = [rest.split()[0] for i, rest in steps if i == "FROM"]
    assert images and all(re.fullmatch(r"python:3\.1[1-9]-slim", image) for image in images)
    users = [rest for i, rest in steps if i == "USER"]
    assert users and users[-1] not in ("root", "0"), "the image must not run as root"
    for instruction, rest in steps:
        if instruction == "COPY" and not rest.startswith("--from"):
            for source in rest.split()[:-1]:
                assert (ROOT / source).exists(), f"COPY {source}: no such file"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = set(pyproject["project"]["optional-dependencies"])
    for _, rest in (step for step in steps if step[0] == "RUN"):
        for group in re.findall(r"\[([a-z,]+)\]", rest):
            assert set(group.split(",")) <= extras, f"unknown extras {group}"
    env = docker_env()
    check_environment(env, "Dockerfile")
    exposed = [rest for i, rest in steps if i == "EXPOSE"]
    assert exposed == [env["SIGNOFF_PORT"]]
    [healthcheck] = [rest for i, rest in steps if i == "HEALTHCHECK"]
    assert "/healthz" in healthcheck and "SIGNOFF_PORT" in healthcheck
    [entrypoint] = [rest for i, rest in steps if i == "ENTRYPOINT"]
    assert yaml.safe_load(entrypoint) == ["signoff"]
    [command] = [rest for i, rest in steps if i == "CMD"]
    check_command(yaml.safe_load(command), "Dockerfile CMD")


# --- compose ------------------------------------------------------------------------------


def test_compose() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) >= {"signoff", "postgres", "migrate"}
    built = services["migrate"]["build"]
    assert (DEPLOY / built["context"] / built["dockerfile"]).resolve() == DEPLOY / "Dockerfile"
    assert services["migrate"]["command"] == ["migrate"]
    assert services["signoff"]["command"] == ["serve"]
    depends = services["signoff"]["depends_on"]["migrate"]["condition"]
    assert depends == "service_completed_successfully"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("signoff", "migrate"):
        service = services[name]
        check_command(service["command"], f"compose {name}")
        env = {**docker_env(), **service["environment"]}
        check_environment(env, f"compose {name}")
        assert any(k.startswith("SIGNOFF_DATABASE_URL") for k in service["environment"])
        for secret in service.get("secrets", []):
            assert secret in compose["secrets"], f"compose {name}: unknown secret {secret}"
        for key, value in service["environment"].items():
            if key.endswith(FILE_SUFFIX):
                assert value.removeprefix("/run/secrets/") in service["secrets"], key
    serve_env = services["signoff"]["environment"]
    assert {"SIGNOFF_OPERATOR_TOKEN_FILE", "SIGNOFF_COOKIE_SECRET_FILE"} <= set(serve_env)
    assert serve_env["SIGNOFF_AUTO_MIGRATE"] == "false"
    port = serve_env["SIGNOFF_PORT"]
    assert all(str(p).endswith(f":{port}") for p in services["signoff"]["ports"])


# --- Kubernetes ---------------------------------------------------------------------------


def manifests() -> Iterator[dict[str, Any]]:
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                yield document


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [m for m in manifests() if m["kind"] == kind]


def container_env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: str(e.get("value", "")) for e in container.get("env", [])}


def test_kubernetes() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kubernetes" / "kustomization.yaml").read_text())
    for resource in kustomization["resources"]:
        assert (DEPLOY / "kubernetes" / resource).is_file(), resource
    [secret] = by_kind("Secret")
    secret_keys = set(secret["stringData"])
    [deployment] = by_kind("Deployment")
    [job] = by_kind("Job")
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    assert pod["metadata"]["annotations"]["prometheus.io/path"] in HEALTH_ROUTES
    [container] = pod["spec"]["containers"]
    check_command(container["args"], "Deployment")
    env = container_env(container)
    check_environment(env, "Deployment")
    assert env["SIGNOFF_AUTO_MIGRATE"] == "false"
    port = int(env["SIGNOFF_PORT"])
    [http] = container["ports"]
    assert http["containerPort"] == port
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(port)
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] in (http["name"], port)
    grace = float(env["SIGNOFF_SHUTDOWN_GRACE_SECONDS"])
    assert pod["spec"]["terminationGracePeriodSeconds"] > grace
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    for workload, spec in (("Deployment", pod["spec"]), ("Job", job["spec"]["template"]["spec"])):
        mounts = {v["name"]: v["secret"] for v in spec["volumes"] if "secret" in v}
        assert all(m["secretName"] == secret["metadata"]["name"] for m in mounts.values())
        for item in (i for m in mounts.values() for i in m.get("items", [])):
            assert item["key"] in secret_keys, f"{workload}: no secret key {item['key']}"
        for c in spec["containers"]:
            check_environment(container_env(c), workload)
            paths = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
            for name, value in container_env(c).items():
                if name.endswith(FILE_SUFFIX):
                    folder, _, key = value.rpartition("/")
                    assert paths.get(folder) in mounts, f"{workload}: {value} is not mounted"
                    assert key in secret_keys, f"{workload}: {name} names no secret key"
    [job_container] = job["spec"]["template"]["spec"]["containers"]
    assert job_container["args"] == ["migrate"]
    labels = pod["metadata"]["labels"]
    [service] = by_kind("Service")
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"][0]["targetPort"] in (http["name"], port)
    [pdb] = by_kind("PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["minAvailable"] < deployment["spec"]["replicas"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()


# --- systemd ------------------------------------------------------------------------------


def test_systemd_unit() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(DEPLOY / "systemd" / "signoff.service")
    service = unit["Service"]
    argv = shlex.split(service["ExecStart"])
    assert Path(argv[0]).name == "signoff"
    check_command(argv[1:], "signoff.service")
    assert service["User"] != "root"
    assert service["KillSignal"] == "SIGTERM"
    text = (DEPLOY / "systemd" / "signoff.service").read_text()
    credentials = set(re.findall(r"^LoadCredential=([a-z_]+):", text, re.M))
    for name, value in re.findall(r"^Environment=(SIGNOFF_\w+)=(\S+)", text, re.M):
        check_variable(name, "signoff.service")
        if name.endswith(FILE_SUFFIX):
            assert value.removeprefix("%d/") in credentials, name
    env = dict(
        line.split("=", 1)
        for line in (DEPLOY / "systemd" / "signoff.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    check_environment(env, "signoff.env")
    Settings(**{k.removeprefix("SIGNOFF_").lower(): v for k, v in env.items()})


def test_every_setting_the_kit_mentions_exists() -> None:
    for path in DEPLOY.rglob("*"):
        if path.is_file() and path.suffix in ("", ".yaml", ".md", ".service", ".env"):
            # Patterns such as SIGNOFF_SLACK_* name groups, not settings.
            for name in set(re.findall(r"\bSIGNOFF_[A-Z0-9_]+\b(?!\*)", path.read_text())):
                check_variable(name, str(path.relative_to(ROOT)))


# --- Kubernetes, roles split --------------------------------------------------------------

SPLIT = DEPLOY / "kubernetes-split"


def split_manifests(resources: list[str]) -> list[dict[str, Any]]:
    """The manifests the split adds to the base kit (its resources that are files)."""
    found: list[dict[str, Any]] = []
    for resource in resources:
        path = SPLIT / resource
        if path.is_file():
            found.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return found


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


def test_kubernetes_split_roles() -> None:
    kustomization = yaml.safe_load((SPLIT / "kustomization.yaml").read_text())
    resources = kustomization["resources"]
    assert "../kubernetes" in resources  # the base kit, unchanged
    for resource in resources:
        assert (SPLIT / resource).exists(), resource
    [base] = by_kind("Deployment")
    [base_container] = base["spec"]["template"]["spec"]["containers"]
    base_env = container_env(base_container)
    # The base Deployment, behind the Service, becomes the web role.
    [patch_entry] = kustomization["patches"]
    patch = yaml.safe_load((SPLIT / patch_entry["path"]).read_text())
    assert (patch["kind"], patch["metadata"]["name"]) == ("Deployment", base["metadata"]["name"])
    [patched] = patch["spec"]["template"]["spec"]["containers"]
    assert patched["name"] == base_container["name"]
    assert container_env(patched) == {"SIGNOFF_ROLE": "web"}
    assert "SIGNOFF_ROLE" not in base_env  # the base kit stays role all

    documents = split_manifests(resources)
    [worker] = [d for d in documents if d["kind"] == "Deployment"]
    pod = worker["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert selects(worker["spec"]["selector"]["matchLabels"], labels)
    assert not selects(base["spec"]["selector"]["matchLabels"], labels)
    assert not selects(
        worker["spec"]["selector"]["matchLabels"], base["spec"]["template"]["metadata"]["labels"]
    )
    # Workers answer only health routes: the Service and the web budget never pick them.
    [service] = by_kind("Service")
    assert not selects(service["spec"]["selector"], labels)
    [base_pdb] = by_kind("PodDisruptionBudget")
    assert not selects(base_pdb["spec"]["selector"]["matchLabels"], labels)
    [pdb] = [d for d in documents if d["kind"] == "PodDisruptionBudget"]
    assert selects(pdb["spec"]["selector"]["matchLabels"], labels)
    assert pdb["spec"]["minAvailable"] < worker["spec"]["replicas"]

    [container] = pod["spec"]["containers"]
    assert container["image"] == base_container["image"]
    check_command(container["args"], "worker Deployment")
    env = container_env(container)
    check_environment(env, "worker Deployment")
    assert Settings.model_validate({"role": env["SIGNOFF_ROLE"]}).role == "worker"
    # Both roles take the same settings: a worker delivers the cards of the web pods.
    for name, value in base_env.items():
        assert env.get(name) == value, f"worker Deployment: {name} differs from the base"
    port = int(env["SIGNOFF_PORT"])
    [http] = container["ports"]
    assert http["containerPort"] == port
    assert pod["metadata"]["annotations"]["prometheus.io/path"] == "/metrics"
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(port)
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    grace = float(env["SIGNOFF_SHUTDOWN_GRACE_SECONDS"])
    assert pod["spec"]["terminationGracePeriodSeconds"] > grace
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["volumes"] == base["spec"]["template"]["spec"]["volumes"]
    assert container["volumeMounts"] == base_container["volumeMounts"]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubernetes_split_renders_a_web_and_a_worker_deployment() -> None:
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(SPLIT)], capture_output=True, text=True, timeout=60
    )
    assert rendered.returncode == 0, rendered.stderr
    documents = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    roles = {}
    for deployment in (d for d in documents if d["kind"] == "Deployment"):
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        roles[deployment["metadata"]["name"]] = container_env(container).get("SIGNOFF_ROLE")
    assert roles == {"signoff": "web", "signoff-worker": "worker"}
    assert {d["kind"] for d in documents} >= {"Job", "Service", "PodDisruptionBudget"}


# --- agents ConfigMap, image ids, systemd extras, PostgreSQL version ---------------------


def pod_specs() -> list[tuple[str, dict[str, Any]]]:
    """Every pod template of the kit and of the roles split, by where it is."""
    specs = [
        (f"{m['kind']} {m['metadata']['name']}", m["spec"]["template"]["spec"])
        for m in manifests()
        if m["kind"] in ("Deployment", "Job")
    ]
    resources = yaml.safe_load((SPLIT / "kustomization.yaml").read_text())["resources"]
    specs += [
        (f"split {d['kind']} {d['metadata']['name']}", d["spec"]["template"]["spec"])
        for d in split_manifests(resources)
        if d["kind"] == "Deployment"
    ]
    return specs


def test_kubernetes_agents_file_is_a_config_map() -> None:
    from bot.agents_file import load_agents_file

    kustomization = yaml.safe_load((DEPLOY / "kubernetes" / "kustomization.yaml").read_text())
    generated = {g["name"]: g["files"] for g in kustomization["configMapGenerator"]}
    [source] = generated["signoff-agents"]
    # The file is the product's own agents file, valid as it is shipped.
    agents = load_agents_file(DEPLOY / "kubernetes" / source)
    assert agents.agents and all(server.url for server in agents.servers)
    served = [(where, spec) for where, spec in pod_specs() if "Job" not in where]
    assert len(served) == 2  # the kit's Deployment and the split's worker Deployment
    for where, spec in served:
        volumes = {v["name"]: v for v in spec["volumes"]}
        [container] = spec["containers"]
        env = container_env(container)
        folder, _, name = env["SIGNOFF_AGENTS"].rpartition("/")
        assert name == Path(source).name, where
        [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == folder]
        assert mount.get("readOnly") is True, where
        assert volumes[mount["name"]]["configMap"]["name"] == "signoff-agents", where
        assert "SIGNOFF_APP" not in env, f"{where}: the agents come from the file"
        # The model the file names has its key in the Secret.
        assert env["SIGNOFF_OPENAI_API_KEY_FILE"].startswith("/run/secrets/signoff/"), where


def test_image_user_and_group_are_the_pods() -> None:
    run = " ".join(rest for instruction, rest in dockerfile() if instruction == "RUN")
    [gid] = re.findall(r"groupadd [^&]*--gid (\d+) signoff", run)
    [(uid, user_gid)] = re.findall(r"useradd [^&]*--uid (\d+) --gid (\d+)", run)
    assert user_gid == gid
    users = [rest for instruction, rest in dockerfile() if instruction == "USER"]
    assert users[-1] == f"{uid}:{gid}"
    for where, spec in pod_specs():
        context = spec.get("securityContext", {})
        if where.startswith("Job"):  # the Job may leave the image's user as it is
            context = context or {"runAsUser": int(uid), "runAsGroup": int(gid)}
        assert context.get("runAsUser") == int(uid), where
        assert context.get("runAsGroup") == int(gid), where
        assert context.get("fsGroup", int(gid)) == int(gid), where


def test_systemd_install_line_has_the_postgres_extra() -> None:
    readme = (DEPLOY / "README.md").read_text()
    section = readme.split("## systemd", 1)[1].split("\n## ", 1)[0]
    unit = (DEPLOY / "systemd" / "signoff.service").read_text()
    lines = [line for line in (section + unit).splitlines() if "pip install" in line]
    assert len(lines) >= 2, lines
    for line in lines:
        [extras] = re.findall(r"signoff\[([a-z,-]+)\]", line)
        assert "postgres" in extras.split(","), line


def test_compose_runs_the_postgresql_the_docs_name() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    image = compose["services"]["postgres"]["image"]
    match = re.fullmatch(r"postgres:(\d+)(?:[.-][\w.-]*)?", image)
    assert match, image
    major = match.group(1)
    storage = (ROOT / "docs" / "storage-and-replicas.md").read_text()
    assert re.findall(r"Tested with PostgreSQL (\d+)", storage) == [major]
    assert f"`postgres:{major}`" in storage
    assert f"PostgreSQL {major}" in (ROOT / "docs" / "deploy.md").read_text()
