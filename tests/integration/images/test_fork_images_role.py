# Apache-2.0
"""The fork_images role, run with ansible-playbook playbooks/images.yml against a
real registry (TLS + htpasswd) and the stand-in fork repositories.

The module-scoped scenario goes: check mode on a fresh host, first run (all 19
images built and pushed), second run (nothing built); the failure cases then
run against that state, each with its own tag where it would build.
"""
import json
import subprocess

import pytest

from conftest import FRAC_IMAGES, KAI_SERVICES, ForkImages, registry_client

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def scenario(tmp_path_factory, image_registry, stand_in_forks):
    return ForkImages(tmp_path_factory.mktemp("fork-images"), image_registry, stand_in_forks)


@pytest.fixture(scope="module")
def fresh_check(scenario):
    return scenario.play("--check", "--diff")


@pytest.fixture(scope="module")
def first_run(scenario, fresh_check):
    return scenario.play("-vvv")


@pytest.fixture(scope="module")
def second_run(scenario, first_run):
    assert first_run.rc == 0, first_run.output[-4000:]
    outcome = scenario.play()
    print(f"\nfork_images wall time: first run {first_run.wall_s:.1f}s, second run {outcome.wall_s:.1f}s")
    return outcome


def git(path, *args):
    return subprocess.run(["git", "-C", str(path), *args], check=True, text=True, capture_output=True).stdout


def test_check_mode_on_a_fresh_host_builds_nothing(scenario, fresh_check):
    assert fresh_check.rc == 0, fresh_check.output[-4000:]
    assert scenario.records() == []
    assert not (scenario.workdir / "KAI-Scheduler").exists()
    assert "Would run in" in fresh_check.output
    infos = [registry_client(scenario.registry).image_info(ref) for ref in scenario.refs(scenario.default_tag())]
    assert not any(i["exists"] for i in infos)
    assert not scenario.manifest.exists()


def test_first_run_builds_and_pushes_all_19(scenario, first_run):
    assert first_run.rc == 0, first_run.output[-4000:]
    assert first_run.recap["changed"] > 0
    tag = scenario.default_tag()
    base = scenario.registry.address + "/kai-fork"
    records = scenario.records()
    assert [(r["fork"], r["goals"], r["vars"], r["env"]) for r in records] == [
        ("gpu-fractioning", ["docker-build", "docker-push"],
         {"DOCKER_REPO_BASE": base + "/kai-gpu-fractioning", "VERSION": tag, "PLATFORM": "linux/amd64"}, {}),
        ("KAI-Scheduler", ["build"],
         {"DOCKER_REPO_BASE": base + "/kai-scheduler", "DOCKER_TAG": tag, "DOCKER_BUILD_PLATFORM": "linux/amd64",
          "DOCKER_BUILDX_ADDITIONAL_ARGS": "--push"}, {}),
    ]
    assert records[0]["commit"] == scenario.forks["gpu_fractioning"]["commit"]
    assert records[1]["commit"] == scenario.forks["kai_scheduler"]["commit"]
    assert git(scenario.workdir / "KAI-Scheduler", "rev-parse", "HEAD").strip() == scenario.forks["kai_scheduler"]["commit"]

    client = registry_client(scenario.registry)
    infos = {i["image"]: i for i in (client.image_info(ref, ["linux/amd64"]) for ref in scenario.refs(tag))}
    assert len(infos) == 19 and all(i["complete"] for i in infos.values())

    manifest = json.loads(scenario.manifest.read_text())
    assert manifest["tag"] == tag
    assert manifest["commits"] == {"kai_scheduler": scenario.forks["kai_scheduler"]["commit"],
                                   "gpu_fractioning": scenario.forks["gpu_fractioning"]["commit"]}
    assert sorted((e["fork"], e["service"]) for e in manifest["images"]) == sorted(
        [("kai-gpu-fractioning", i) for i in FRAC_IMAGES] + [("kai-scheduler", s) for s in KAI_SERVICES])
    for entry in manifest["images"]:
        live = infos[entry["image"] + ":" + tag]
        assert entry["digest"] == live["digest"]
        assert entry["reference"] == entry["image"] + "@" + live["digest"]
        assert entry["platforms"] == ["linux/amd64"]

    log = scenario.workdir / "logs" / f"KAI-Scheduler-{tag}.log"
    assert log.exists() and ">>> building helm-hooks" in log.read_text()
    assert str(log) in first_run.output


def test_password_appears_in_no_output_at_vvv(scenario, first_run):
    assert "<buildhost>" in first_run.output or "ESTABLISH LOCAL CONNECTION" in first_run.output  # really -vvv
    assert "Log in to" in first_run.output
    assert scenario.registry.password not in first_run.output


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
    assert outcome.output.count("Would run in") == 2
    assert len(scenario.records()) == 2


def test_dirty_tree_fails_before_any_build(scenario, second_run):
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
    assert "is not clean" in outcome.output
    assert "M Makefile" in outcome.output and "?? notes.txt" in outcome.output
    assert len(scenario.records()) == 2


def test_wrong_sha_fails_naming_it(scenario, second_run):
    wrong = "0123456789abcdef0123456789abcdef01234567"
    outcome = scenario.play(fork_images_kai_scheduler_commit=wrong)
    assert outcome.rc != 0
    assert f"Commit {wrong} (fork_images_kai_scheduler_commit) is not in" in outcome.output
    assert len(scenario.records()) == 2


@pytest.mark.parametrize("overrides, message", [
    ({"fork_images_kai_scheduler_commit": "b35a7b2"}, "must be full 40-character"),
    ({"fork_images_gpu_fractioning_commit": "main"}, "must be full 40-character"),
    ({"fork_images_registry": "https://registry.example.com/kai"}, "without scheme, tag or trailing slash"),
    ({"fork_images_registry": "team/kai-fork"}, "Docker Hub path"),
    ({"fork_images_registry": ""}, "must be a registry you can push"),
    ({"fork_images_tag": "bad tag"}, "must be a valid image tag"),
    ({"fork_images_platforms": ["amd64"]}, "os/arch"),
    ({"fork_images_push": False, "fork_images_platforms": ["linux/amd64", "linux/arm64"]}, "need fork_images_push=true"),
    ({"fork_images_registry_password": ""}, "or neither"),
], ids=["short-sha", "branch-name", "scheme", "no-host", "empty-registry", "tag", "platform", "local-multi",
        "half-credentials"])
def test_bad_input_is_rejected_before_anything_changes(scenario, tmp_path, overrides, message):
    outcome = scenario.play(fork_images_workdir=str(tmp_path / "untouched"), **overrides)
    assert outcome.rc != 0
    assert message in outcome.output, outcome.output[-3000:]
    assert not (tmp_path / "untouched").exists()


def test_missing_image_after_build_fails_naming_it(scenario, second_run):
    before = scenario.manifest.read_text()
    outcome = scenario.play(fork_images_tag="missing-1",
                            extra_env={"STANDIN_SKIP_PUSH": "kai-scheduler/binder kai-gpu-fractioning/mpsd"})
    assert outcome.rc != 0
    base = scenario.registry.address + "/kai-fork"
    assert "2 of 19 images are missing" in outcome.output
    assert f"{base}/kai-scheduler/binder:missing-1 (not in the registry)" in outcome.output
    assert f"{base}/kai-gpu-fractioning/mpsd:missing-1 (not in the registry)" in outcome.output
    assert scenario.manifest.read_text() == before


def test_failed_make_reports_the_log(scenario, second_run, tmp_path):
    outcome = scenario.play(fork_images_tag="fail-1", extra_env={"STANDIN_CERT_DIR": str(tmp_path)})
    assert outcome.rc != 0
    log = scenario.workdir / "logs" / "kai-gpu-fractioning-fail-1.log"
    assert f"Full log on buildhost: {log}" in outcome.output
    assert "make docker-build docker-push" in outcome.output
    assert "certificate" in log.read_text()


def test_wrong_password_fails_with_an_auth_message_and_is_never_shown(scenario, second_run):
    wrong = "Wr0ngPassw0rd-7f3a9c"
    count = len(scenario.records())
    outcome = scenario.play("-vvv", fork_images_tag="auth-1", fork_images_registry_password=wrong)
    assert outcome.rc != 0
    assert "authentication failed (HTTP 401)" in outcome.output
    assert f"for user {scenario.registry.username}" in outcome.output
    assert wrong not in outcome.output
    assert scenario.registry.password not in outcome.output
    assert len(scenario.records()) == count


def test_multi_platform_build(scenario, second_run, tmp_path):
    platforms = ["linux/amd64", "linux/arm64"]
    manifest = tmp_path / "multi.json"
    count = len(scenario.records())
    outcome = scenario.play(fork_images_tag="multi-1", fork_images_platforms=platforms,
                            fork_images_manifest_path=str(manifest))
    assert outcome.rc == 0, outcome.output[-4000:]
    base = scenario.registry.address + "/kai-fork"
    new = scenario.records()[count:]
    assert [(r["fork"], r["goals"], r["vars"], r["env"]) for r in new] == [
        ("gpu-fractioning", ["docker-buildx"],
         {"DOCKER_REPO_BASE": base + "/kai-gpu-fractioning", "VERSION": "multi-1",
          "DOCKER_BUILD_PLATFORM": "linux/amd64,linux/arm64"}, {"BUILDX_BUILDER": "kai-multiarch"}),
        ("KAI-Scheduler", ["build"],
         {"DOCKER_REPO_BASE": base + "/kai-scheduler", "DOCKER_TAG": "multi-1",
          "DOCKER_BUILD_PLATFORM": "linux/amd64,linux/arm64", "DOCKER_BUILDX_ADDITIONAL_ARGS": "--push"},
         {"BUILDX_BUILDER": "kai-multiarch"}),
    ]
    entries = json.loads(manifest.read_text())["images"]
    assert len(entries) == 19
    assert all(e["platforms"] == platforms and "index" in e["media_type"] for e in entries)
