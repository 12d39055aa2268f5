"""deploy/observability: the alert rules pass promtool and their unit tests, the dashboard
is well formed, and every metric either one queries is on a served signoff's /metrics."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from metrics_kit import api, declared, metric_names, scrape, served, until_status

KIT = Path(__file__).resolve().parents[2] / "deploy" / "observability"
RULES = KIT / "signoff-alerts.yaml"
RULE_TESTS = KIT / "tests" / "signoff-alerts.test.yaml"
DASHBOARD = KIT / "signoff-dashboard.json"
PROMTOOL = shutil.which("promtool")

needs_promtool = pytest.mark.skipif(
    PROMTOOL is None and not os.environ.get("CI"),
    reason="promtool is not installed (Debian's prometheus package; .ci/run installs it)",
)


def promtool(*args: str, cwd: Path = KIT) -> str:
    assert PROMTOOL is not None, "CI=true but promtool is not installed"
    done = subprocess.run(
        [PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(RULES.read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def panels() -> list[dict[str, Any]]:
    return list(json.loads(DASHBOARD.read_text())["panels"])


def queries() -> dict[str, str]:
    """Every PromQL expression of the kit, by where it is."""
    found = {f"alert {rule['alert']}": str(rule["expr"]) for rule in rules()}
    for panel in panels():
        for target in panel.get("targets", []):
            found[f"panel {panel['title']!r} {target['refId']}"] = target["expr"]
    dashboard = json.loads(DASHBOARD.read_text())
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            # label_values(<series>, <label>)
            series = variable["definition"].removeprefix("label_values(").split(",")[0]
            found[f"variable {variable['name']}"] = series
    return found


@needs_promtool
def test_promtool_checks_the_rules() -> None:
    assert f"SUCCESS: {len(rules())} rules found" in promtool("check", "rules", str(RULES))


@needs_promtool
def test_promtool_unit_tests_of_the_alerts_pass() -> None:
    assert "SUCCESS" in promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)


@needs_promtool
def test_a_broken_rule_file_fails_the_check(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        RULES.read_text().replace("signoff_database_up) == 0", "signoff_database_up) ==", 1)
    )
    with pytest.raises(AssertionError):
        promtool("check", "rules", str(broken))


def test_every_alert_has_a_unit_test_that_fires_it() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())
    fired = {
        case["alertname"]
        for test in tests["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert fired == {rule["alert"] for rule in rules()}
    for rule in rules():
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_the_dashboard_is_well_formed() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] == "signoff"
    ids = [panel["id"] for panel in panels()]
    assert len(ids) == len(set(ids))
    names = {variable["name"] for variable in dashboard["templating"]["list"]}
    assert "datasource" in names
    for panel in panels():
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        for target in panel["targets"]:
            assert metric_names(target["expr"]), (panel["title"], target["expr"])


def test_the_metric_name_parser() -> None:
    assert metric_names(
        'histogram_quantile(0.95, sum by (edge, le) (rate(a_bucket{edge="x"}[5m]))) > 2.5'
    ) == {"a_bucket"}
    assert metric_names('absent(b) or (time() - max(c{job=~"$job"})) > 300 unless on() d') == {
        "b",
        "c",
        "d",
    }


async def test_every_metric_the_kit_queries_is_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIGNOFF_TEST_LEDGER", str(tmp_path / "ledger.jsonl"))
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    async with served(tmp_path / "signoff.db") as service:
        started = await api(service, "POST", "/api/runs", {"agent": "payments", "input": "pay"})
        run = await until_status(service, started["run_id"], "awaiting")
        ticket = run["pending"][0]["ticket_id"]
        await api(service, "POST", f"/api/tickets/{ticket}/decision", {"decision": "allow"})
        await until_status(service, run["run_id"], "done")
        served_names = declared(await scrape(service))
    missing = {
        where: sorted(metric_names(expr) - served_names)
        for where, expr in queries().items()
        if metric_names(expr) - served_names
    }
    assert missing == {}
    # The check itself can fail: a name that is not served is caught.
    assert metric_names("sum(signoff_no_such_series)") - served_names
