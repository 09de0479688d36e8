# Apache-2.0
"""The fork_images role, run with ansible-playbook playbooks/images.yml against a
real registry (TLS + htpasswd), the stand-in fork repositories and the stand-in
docker CLI.

The module-scoped scenario goes: check mode on a fresh host, first run at -vvv
(all 19 images built and pushed, KAI-Scheduler for the build host's platform
as the guide's make build builds it, with the current docker-driver builder),
second run (nothing built); the failure cases then run against that state,
each with its own tag where it would build. Several platforms through a
docker-container builder: test_fork_images_multiplatform.py.
"""
import base64
import json
import os
import re
import signal
import stat
import subprocess
import time

import pytest

from conftest import BOTH, FRAC_IMAGES, HOST_PLATFORM, KAI_SERVICES, ForkImages, registry_client
from secret_search import secret_forms

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def scenario(tmp_path_factory, image_registry, stand_in_forks):
    return ForkImages(tmp_path_factory.mktemp("fork-images"), image_registry, stand_in_forks)


@pytest.fixture(scope="module")
def fresh_check(scenario):
    return scenario.play("--check", "--diff")


@pytest.fixture(scope="module")
def first_run(scenario, fresh_check):
    """At -vvv with --diff, its log and async results kept, for the secrets test."""
    env = {"ANSIBLE_LOG_PATH": str(scenario.root / "ansible.log"),
           "ANSIBLE_ASYNC_DIR": str(scenario.root / "async")}
    return scenario.play("-vvv", "--diff", env=env)


@pytest.fixture(scope="module")
def second_run(scenario, first_run):
    assert first_run.rc == 0, first_run.output[-4000:]
    outcome = scenario.play()
    print(f"\nfork_images wall time: first run {first_run.wall_s:.1f}s, second run {outcome.wall_s:.1f}s")
    return outcome


def git(path, *args):
    return subprocess.run(["git", "-C", str(path), *args], check=True, text=True, capture_output=True).stdout


def flat(outcome):
    return " ".join(outcome.output.split())


def test_check_mode_on_a_fresh_host_builds_nothing(scenario, fresh_check):
    assert fresh_check.rc == 0, fresh_check.output[-4000:]
    assert scenario.records() == []
    assert not scenario.workdir.exists()
    assert flat(fresh_check).count("Would run in") == 2
    infos = [registry_client(scenario.registry).image_info(ref) for ref in scenario.refs(scenario.default_tag())]
    assert not any(i["exists"] for i in infos)
    assert not scenario.manifest.exists()
    assert not scenario.auth_file.exists()                               # logged in nowhere
    assert scenario.docker_calls() == ["buildx ls", "buildx inspect"]      # started and installed nothing


def test_first_run_builds_what_the_guide_builds_and_verifies_each_fork(scenario, first_run):
    assert first_run.rc == 0, first_run.output[-4000:]
    assert first_run.recap["changed"] > 0
    tag = scenario.default_tag()
    base = scenario.registry.address + "/kai-fork"
    records = scenario.records()
    assert [(r["fork"], r["goals"], r["vars"], r["env"]) for r in records] == [
        ("gpu-fractioning", ["docker-build", "docker-push"],
         {"DOCKER_REPO_BASE": base + "/kai-gpu-fractioning", "VERSION": tag, "PLATFORM": "linux/amd64"}, {}),
        # the guide's make build: no DOCKER_BUILD_PLATFORM, the Makefile builds the host's platform
        ("KAI-Scheduler", ["build"],
         {"DOCKER_REPO_BASE": base + "/kai-scheduler", "DOCKER_TAG": tag, "DOCKER_BUILDX_ADDITIONAL_ARGS": "--push"},
         {}),
    ]
    assert records[0]["commit"] == scenario.forks["gpu_fractioning"]["commit"]
    assert records[1]["commit"] == scenario.forks["kai_scheduler"]["commit"]
    assert git(scenario.workdir / "KAI-Scheduler", "rev-parse", "HEAD").strip() == scenario.forks["kai_scheduler"]["commit"]
    # The host's platform needs no emulation: nothing was installed, no builder created or used.
    assert not [c for c in scenario.docker_calls() if c.startswith(("run ", "buildx create", "buildx use"))]

    client = registry_client(scenario.registry)
    infos = {i["image"]: i for i in (client.image_info(ref, BOTH) for ref in scenario.refs(tag))}
    assert len(infos) == 19 and all(i["exists"] for i in infos.values())
    for ref, info in infos.items():
        assert info["platforms"] == ([HOST_PLATFORM] if "/kai-scheduler/" in ref else ["linux/amd64"]), ref

    manifest = json.loads(scenario.manifest.read_text())
    assert manifest["tag"] == tag
    assert manifest["platforms"] == {"kai_scheduler": [HOST_PLATFORM], "gpu_fractioning": ["linux/amd64"]}
    assert manifest["commits"] == {"kai_scheduler": scenario.forks["kai_scheduler"]["commit"],
                                   "gpu_fractioning": scenario.forks["gpu_fractioning"]["commit"]}
    assert sorted((e["fork"], e["service"]) for e in manifest["images"]) == sorted(
        [("gpu_fractioning", i) for i in FRAC_IMAGES] + [("kai_scheduler", s) for s in KAI_SERVICES])
    for entry in manifest["images"]:
        live = infos[entry["image"] + ":" + tag]
        assert entry["digest"] == live["digest"]
        assert entry["reference"] == entry["image"] + "@" + live["digest"]
        assert entry["platforms"] == live["platforms"]

    log = scenario.workdir / "logs" / f"KAI-Scheduler-{tag}.log"
    assert log.exists() and f">>> building helm-hooks ({HOST_PLATFORM})" in log.read_text()
    assert str(log) in first_run.output
    # A progress line while a build runs (fork_images_build_report_interval: 1), not a retry line per poll.
    assert re.search(r": (KAI-Scheduler|gpu-fractioning) building for 0 min; (step .+; )?last line: ",
                     first_run.output), first_run.output[-4000:]
    assert "FAILED - RETRYING" not in first_run.output


def test_secrets_appear_nowhere_at_vvv(scenario, first_run):
    """The registry password, the build environment's token and their encoded
    forms: not in the -vvv --diff output, the log, async results or any file
    the run left (the auth file aside: it holds the login by design, 0600; and
    the variables file the test passes with -e)."""
    assert "ESTABLISH LOCAL CONNECTION" in first_run.output                # really -vvv
    assert "Log in with podman or buildah" in first_run.output            # the login ran
    password, user, token = scenario.registry.password, scenario.registry.username, scenario.token
    secrets = secret_forms(user, password, token)     # clear, base64, URL-encoded, JSON-escaped
    assert not [s for s in secrets if s in first_run.output]
    leaks = []
    for folder, _dirs, files in os.walk(scenario.root):
        for name in files:
            path = os.path.join(folder, name)
            if path in (str(scenario.auth_file), str(scenario.vars_file)) or os.path.islink(path):
                continue     # the login's store (0600, by design) and the test's own input
            data = open(path, "rb").read()
            leaks += [(path, s) for s in secrets if s.encode() in data]
    assert leaks == []
    assert (scenario.root / "ansible.log").stat().st_size > 0 and any((scenario.root / "async").iterdir())
    assert stat.S_IMODE(scenario.auth_file.stat().st_mode) == 0o600
    assert not (scenario.workdir / ".build-env").exists()                 # the 0600 env file is gone


def test_second_run_builds_nothing(scenario, second_run):
    assert second_run.rc == 0, second_run.output[-4000:]
    assert second_run.recap["changed"] == 0
    assert len(scenario.records()) == 2
    assert "all images present, no build" in second_run.output


def test_check_mode_on_a_built_registry_reports_no_change(scenario, second_run):
    outcome = scenario.play("--check", "--diff")
    assert outcome.rc == 0, outcome.output[-4000:]
    assert outcome.recap["changed"] == 0


def test_forced_rebuild_in_check_mode_only_announces(scenario, second_run):
    outcome = scenario.play("--check", fork_images_force_rebuild=True)
    assert outcome.rc == 0, outcome.output[-4000:]
    assert flat(outcome).count("Would run in") == 2
    assert len(scenario.records()) == 2


def test_tracked_change_fails_before_any_build_naming_the_files(scenario, second_run):
    kai = scenario.workdir / "KAI-Scheduler"
    with open(kai / "Makefile", "a") as handle:
        handle.write("# local edit\n")
    (kai / "notes.txt").write_text("scratch\n")
    try:
        outcome = scenario.play(fork_images_force_rebuild=True)
    finally:
        git(kai, "checkout", "--", "Makefile")
        (kai / "notes.txt").unlink()
    assert outcome.rc != 0
    assert f"{kai} is not clean" in flat(outcome)
    assert "M Makefile" in outcome.output and "?? notes.txt" in outcome.output
    assert len(scenario.records()) == 2


def test_untracked_file_fails_before_any_build(scenario, second_run):
    frac = scenario.workdir / "kai-gpu-fractioning"
    (frac / "secrets.env").write_text("x\n")
    try:
        outcome = scenario.play(fork_images_force_rebuild=True)
    finally:
        (frac / "secrets.env").unlink()
    assert outcome.rc != 0
    assert f"{frac} is not clean (git status --porcelain: ?? secrets.env)" in flat(outcome)
    assert len(scenario.records()) == 2


def test_clone_of_another_repository_is_refused_and_left_alone(scenario, second_run):
    kai = scenario.workdir / "KAI-Scheduler"
    url = git(kai, "config", "--get", "remote.origin.url").strip()
    git(kai, "remote", "set-url", "origin", "https://git.example.com/someone/else.git")
    try:
        outcome = scenario.play()
        origin_after = git(kai, "config", "--get", "remote.origin.url").strip()
    finally:
        git(kai, "remote", "set-url", "origin", url)
    assert outcome.rc != 0
    assert f"{kai} is a clone of https://git.example.com/someone/else.git, not of {url}" in flat(outcome)
    assert origin_after == "https://git.example.com/someone/else.git"     # the git module did not repoint it


def test_wrong_sha_fails_naming_it(scenario, second_run):
    wrong = "0123456789abcdef0123456789abcdef01234567"
    outcome = scenario.play(fork_images_kai_scheduler_commit=wrong)
    assert outcome.rc != 0
    assert f"Could not check out commit {wrong} (fork_images_kai_scheduler_commit)" in flat(outcome)
    assert "pull/2368/head" in flat(outcome)
    assert len(scenario.records()) == 2


def test_failed_make_reports_the_log(scenario, second_run, tmp_path):
    outcome = scenario.play(fork_images_tag="fail-1", extra_env={"STANDIN_CERT_DIR": str(tmp_path)})
    assert outcome.rc != 0
    log = scenario.workdir / "logs" / "kai-gpu-fractioning-fail-1.log"
    assert f"Full log on buildhost: {log}" in flat(outcome)
    assert "make docker-build docker-push" in outcome.output
    assert "certificate" in log.read_text()
    assert not (scenario.workdir / ".build-env").exists()      # removed after a failed build too


def test_wrong_password_fails_with_an_auth_message_and_is_never_shown(scenario, second_run):
    wrong = "Wr0ngPassw0rd-7f3a9c"
    count = len(scenario.records())
    outcome = scenario.play("-vvv", fork_images_tag="auth-1", fork_images_registry_password=wrong)
    assert outcome.rc != 0
    assert "authentication failed (HTTP 401)" in outcome.output
    assert f"for user {scenario.registry.username}" in outcome.output
    for secret in (wrong, base64.b64encode(wrong.encode()).decode(), scenario.registry.password):
        assert secret not in outcome.output
    assert len(scenario.records()) == count


def test_a_play_stopped_mid_build_leaves_make_running_and_no_second_make_starts(scenario, second_run, tmp_path):
    """Ctrl-C while the play waits for gpu-fractioning's make (held at the stand-in's
    gate): make goes on, apart from the play. The next run starts no second make in
    that clone: it fails naming the running build's log, leaves that log alone and
    removes the build environment file. Once that make has ended (and pushed), the
    run after builds only what is still missing: KAI-Scheduler."""
    gate, tag = tmp_path / "gate", "stopped-1"
    extra = {"extra_env": {"STANDIN_MAKE_GATE": str(gate)}, "fork_images_tag": tag}
    count = len(scenario.records())
    play = scenario.start(tmp_path / "stopped.log", **extra)
    try:
        deadline = time.monotonic() + 300
        while len(scenario.records()) == count and play.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert [r["fork"] for r in scenario.records()[count:]] == ["gpu-fractioning"], \
            (tmp_path / "stopped.log").read_text()[-3000:]
        time.sleep(2)                                   # the play is in its wait
    finally:
        os.killpg(play.pid, signal.SIGINT)              # what Ctrl-C sends
        play.wait(timeout=120)
    log = scenario.workdir / "logs" / f"kai-gpu-fractioning-{tag}.log"
    lock = scenario.workdir / "logs" / "kai-gpu-fractioning.lock"
    assert f"{log}, started " in lock.read_text()
    try:
        again = scenario.play(**extra)
        text = flat(again)
        assert again.rc != 0 and "Another make of kai-gpu-fractioning is still running in" in text, \
            again.output[-4000:]
        assert f"log {log}, started " in text and "nothing was started" in text and f"fuser -k {lock}" in text
        assert len(scenario.records()) == count + 1     # no second make
        assert not (scenario.workdir / ".build-env").exists()
    finally:
        gate.touch()
    deadline = time.monotonic() + 300
    while subprocess.run(["flock", "-n", str(lock), "true"], check=False).returncode != 0:
        assert time.monotonic() < deadline, "the stopped play's make did not end"
        time.sleep(1)
    after = scenario.play(**extra)
    assert after.rc == 0, after.output[-4000:]
    assert "kai-gpu-fractioning: all images present, no build" in flat(after)
    assert [r["fork"] for r in scenario.records()[count:]] == ["gpu-fractioning", "KAI-Scheduler"]
    assert not (scenario.workdir / ".build-env").exists()


SECRET = "Tok3n-in-the-url-5e1"


@pytest.mark.parametrize("overrides, drop, words", [
    ({}, ["fork_images_registry"], ["fork_images_registry is not set", "registry.example.com/team/kai-fork"]),
    ({"fork_images_registry": f"robot:{SECRET}@127.0.0.1:5000/kai-fork"}, [],
     ["must not carry credentials", "<redacted>@127.0.0.1:5000/kai-fork", "fork_images_registry_password"]),
    ({"fork_images_kai_scheduler_repo_url": f"https://{SECRET}@github.com/kai-scheduler/KAI-Scheduler.git"}, [],
     ["fork_images_kai_scheduler_repo_url", "https://<redacted>@github.com", "credential helper"]),
    ({"fork_images_kai_scheduler_commit": "44d1d0a"}, [], ["full 40-character", "'44d1d0a'".replace("'", '"')]),
    ({"fork_images_registry_password": ""}, [], ["non-empty password", "leave both unset"]),
    ({}, ["fork_images_registry_password"], ["Give both fork_images_registry_username",
                                             "fork_images_registry_password is unset"]),
    ({"fork_images_build_environment": {"GOPROXY": f"https://{SECRET}@proxy\n"}}, [],
     ["fork_images_build_environment", "values not shown"]),
    ({"fork_images_push": False, "fork_images_kai_scheduler_platforms": BOTH}, [],
     ["fork_images_kai_scheduler_platforms", "exactly one with fork_images_push=false",
      "cannot be loaded into the local Docker daemon"]),
], ids=["registry-unset", "registry-credentials", "clone-url-token", "short-sha", "empty-password",
        "half-credentials", "env-newline", "two-platforms-without-push"])
def test_bad_input_stops_the_real_play_before_anything_changes(scenario, second_run, tmp_path, overrides, drop,
                                                               words):
    """Through the real entry point (playbooks/images.yml): nothing cloned,
    built, logged in or asked of docker. Every rule: test_fork_images_preflight.py."""
    calls = scenario.docker_calls()
    records = len(scenario.records())
    outcome = scenario.play(drop=drop, fork_images_workdir=str(tmp_path / "untouched"), **overrides)
    assert outcome.rc != 0
    text = flat(outcome)
    for word in words:
        assert word in text, (word, outcome.output[-3000:])
    assert "Nothing was changed" in text
    assert SECRET not in outcome.output
    assert not (tmp_path / "untouched").exists()
    assert scenario.docker_calls() == calls and len(scenario.records()) == records


def test_failed_login_is_a_failure_that_builds_nothing(scenario, tmp_path):
    """buildah cannot store the login (its auth file lies under a regular
    file): the play fails at the login, names the tool, user and registry,
    builds nothing and shows no secret."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    count = len(scenario.records())
    outcome = scenario.play("-vvv", fork_images_tag="login-1",
                            extra_env={"REGISTRY_AUTH_FILE": str(blocker / "auth.json")})
    assert outcome.rc != 0
    text = flat(outcome)
    assert (f"buildah login to {scenario.registry.address} as {scenario.registry.username} failed (rc "
            in text), outcome.output[-3000:]
    assert "Nothing was built" in text
    assert len(scenario.records()) == count
    for secret in (scenario.registry.password, base64.b64encode(scenario.registry.password.encode()).decode(),
                   scenario.token):
        assert secret not in outcome.output
    assert not (scenario.workdir / ".build-env").exists()


def test_a_failed_docker_login_is_a_failure_not_a_login(scenario, tmp_path):
    """community.docker.docker_login against a Docker daemon that is not
    there: the play stops at the login naming docker, user and registry (it
    once reported "Logged in": failed_when: false had cleared the failure)."""
    count = len(scenario.records())
    outcome = scenario.play(fork_images_tag="login-docker-1", fork_images_registry_login_tool="docker",
                            extra_env={"DOCKER_HOST": "unix://%s" % (tmp_path / "no-docker.sock")})
    assert outcome.rc != 0
    text = flat(outcome)
    assert f"docker login to {scenario.registry.address} as {scenario.registry.username} failed" in text, \
        outcome.output[-3000:]
    assert "Logged in to" not in text and "Nothing was built" in text
    assert len(scenario.records()) == count
    assert scenario.registry.password not in outcome.output


@pytest.mark.parametrize("check", [False, True], ids=["run", "check-mode"])
def test_two_kai_platforms_on_the_docker_driver_builder_are_refused_before_anything_changes(
        scenario, second_run, tmp_path, check):
    """The current builder is "default" (docker driver), which cannot build
    several platforms: refused after the registry lookup (which says KAI would
    be built) and before the clones, login, QEMU or any make."""
    calls = len(scenario.docker_calls())
    records = len(scenario.records())
    auth = scenario.auth_file.read_bytes()
    args = ("--check",) if check else ()
    outcome = scenario.play(*args, fork_images_tag="docker-two-1", fork_images_kai_scheduler_platforms=BOTH,
                            fork_images_workdir=str(tmp_path / "untouched"))
    assert outcome.rc != 0
    text = flat(outcome)
    assert 'fork_images_kai_scheduler_platforms=["linux/amd64", "linux/arm64"]' in text
    assert "current buildx builder default, whose driver docker cannot build several platforms" in text
    assert "docker-container builder current" in text and "Nothing was changed" in text
    assert not (tmp_path / "untouched").exists()                            # nothing cloned
    assert scenario.docker_calls()[calls:] == ["buildx ls", "buildx inspect"]
    assert len(scenario.records()) == records and scenario.auth_file.read_bytes() == auth
    client = registry_client(scenario.registry)
    assert not any(client.image_info(ref)["exists"] for ref in scenario.refs("docker-two-1"))
