# Apache-2.0
"""KAI-Scheduler for two platforms, asked for: through a docker-container
builder made current, pushed to a registry reached over the network (the
test registry under this machine's host name, see registry_by_name), built
and verified for both; and the refusals of what such a builder cannot do.

Its own build host (clones, buildah storage, stand-in docker state with the
docker-container builder "kai-builder" current), the session's registry and
stand-in forks.
"""
import json
import subprocess

import pytest

from conftest import BOTH, ForkImages, registry_client

pytestmark = pytest.mark.slow
CONTAINER_CURRENT = {"current": "kai-builder", "builders": [
    {"name": "kai-builder", "driver": "docker-container", "status": "running"},
    {"name": "default", "driver": "docker", "status": "running"}]}
# Its own tag: the session's registry also holds test_fork_images_role.py's images at the default tag.
TAG = "two-1"


@pytest.fixture(scope="module")
def multi(tmp_path_factory, registry_by_name, stand_in_forks):
    scenario = ForkImages(tmp_path_factory.mktemp("fork-images-multi"), registry_by_name, stand_in_forks)
    scenario.docker.mkdir(parents=True)
    (scenario.docker / "state.json").write_text(json.dumps(CONTAINER_CURRENT))
    return scenario


@pytest.fixture(scope="module")
def multi_run(multi):
    outcome = multi.play(fork_images_tag=TAG, fork_images_kai_scheduler_platforms=BOTH)
    print(f"\nfork_images two-platform run: {outcome.wall_s:.1f}s")
    return outcome


def flat(outcome):
    return " ".join(outcome.output.split())


def test_two_platforms_through_a_container_builder_are_built_pushed_and_verified(multi, multi_run):
    assert multi_run.rc == 0, multi_run.output[-4000:]
    tag = TAG
    base = multi.registry.address + "/kai-fork"
    kai = [r for r in multi.records() if r["fork"] == "KAI-Scheduler"]
    assert [(r["goals"], r["vars"], r["env"]) for r in kai] == [
        (["build"], {"DOCKER_REPO_BASE": base + "/kai-scheduler", "DOCKER_TAG": tag,
                     "DOCKER_BUILD_PLATFORM": "linux/amd64,linux/arm64", "DOCKER_BUILDX_ADDITIONAL_ARGS": "--push"},
         {})]                                                             # the current builder: no BUILDX_BUILDER
    calls = multi.docker_calls()
    assert "run --privileged --rm tonistiigi/binfmt --install arm64" in calls   # QEMU for the builder, once
    assert not [c for c in calls if c.startswith(("buildx use", "buildx create"))]
    client = registry_client(multi.registry)
    for ref in multi.refs(tag):
        info = client.image_info(ref, BOTH)
        assert info["exists"], ref
        assert info["platforms"] == (BOTH if "/kai-scheduler/" in ref else ["linux/amd64"]), ref
    manifest = json.loads(multi.manifest.read_text())
    assert manifest["platforms"] == {"kai_scheduler": BOTH, "gpu_fractioning": ["linux/amd64"]}
    assert all(e["platforms"] == BOTH for e in manifest["images"] if e["fork"] == "kai_scheduler")
    log = (multi.workdir / "logs" / f"KAI-Scheduler-{tag}.log").read_text()
    assert ">>> building helm-hooks (linux/amd64,linux/arm64)" in log
    assert "(builder kai-builder, driver docker-container)" in log


def test_a_second_run_builds_nothing(multi, multi_run):
    assert multi_run.rc == 0, multi_run.output[-4000:]
    outcome = multi.play(fork_images_tag=TAG, fork_images_kai_scheduler_platforms=BOTH)
    assert outcome.rc == 0, outcome.output[-4000:]
    assert outcome.recap["changed"] == 0
    assert len(multi.records()) == 2


def test_images_missing_or_short_of_a_platform_after_the_build_are_named(multi, multi_run):
    """gpu-fractioning's mpsd never arrives and KAI-Scheduler silently builds
    amd64 only: each fork is held to its own platforms."""
    assert multi_run.rc == 0, multi_run.output[-4000:]
    before = multi.manifest.read_text()
    outcome = multi.play(fork_images_tag="short-1", fork_images_kai_scheduler_platforms=BOTH,
                         extra_env={"STANDIN_SKIP_PUSH": "kai-gpu-fractioning/mpsd",
                                    "STANDIN_ONLY_PLATFORMS": "linux/amd64"})
    assert outcome.rc != 0
    base = multi.registry.address + "/kai-fork"
    text = flat(outcome)
    # the failure's own list (the build's progress lines name every image as it is built)
    named = text.partition("16 of 19 images are missing or lack a platform after the build:")[2]
    named = named.partition("Each fork must push")[0]
    assert named, text[-4000:]
    assert f"{base}/kai-gpu-fractioning/mpsd:short-1 (not in the registry)" in named
    assert f"{base}/kai-scheduler/binder:short-1 (lacks linux/arm64)" in named
    assert f"{base}/kai-gpu-fractioning/operator:short-1" not in named
    assert multi.manifest.read_text() == before
    # it logged in again with the same credentials: the auth file did not change, and the role says so
    assert "stored credentials unchanged" in text


@pytest.mark.parametrize("check", [False, True], ids=["run", "check-mode"])
def test_container_builder_to_a_registry_on_localhost_is_refused_before_anything_changes(
        multi, multi_run, image_registry, tmp_path, check):
    """The same registry as 127.0.0.1:PORT: out of the builder container's
    reach (the stand-in's push would fail, connection refused)."""
    calls = len(multi.docker_calls())
    records = len(multi.records())
    local = image_registry.address + "/kai-fork"
    args = ("--check",) if check else ()
    outcome = multi.play(*args, fork_images_registry=local, fork_images_tag="local-1",
                         fork_images_workdir=str(tmp_path / "untouched"))
    assert outcome.rc != 0
    text = flat(outcome)
    assert "current buildx builder kai-builder, whose driver docker-container" in text
    assert f"cannot push to {image_registry.address} on localhost" in text
    assert f'fork_images_registry="{local}"' in text and "Nothing was changed" in text
    assert not (tmp_path / "untouched").exists()
    assert multi.docker_calls()[calls:] == ["buildx ls", "buildx inspect"]
    assert len(multi.records()) == records
    client = registry_client(image_registry)
    assert not any(client.image_info(ref)["exists"]
                   for ref in [r.replace(multi.registry.address, image_registry.address)
                               for r in multi.refs("local-1")])


def test_a_refusal_leaves_the_existing_clones_untouched(multi, multi_run, image_registry):
    """The refusal comes before the clones' fetch and checkout: their HEAD,
    status and last fetch are as the first run left them."""
    def clone_state():
        found = {}
        for folder in ("KAI-Scheduler", "kai-gpu-fractioning"):
            path = multi.workdir / folder
            git = ["git", "-C", str(path)]
            found[folder] = (subprocess.run(git + ["rev-parse", "HEAD"], check=True, text=True,
                                            capture_output=True).stdout,
                             subprocess.run(git + ["status", "--porcelain"], check=True, text=True,
                                            capture_output=True).stdout,
                             (path / ".git" / "FETCH_HEAD").stat().st_mtime_ns)
        return found

    before = clone_state()
    outcome = multi.play(fork_images_registry=image_registry.address + "/kai-fork", fork_images_tag="local-2")
    assert outcome.rc != 0 and "cannot push to" in flat(outcome)
    assert clone_state() == before
    assert before["KAI-Scheduler"][0].strip() == multi.forks["kai_scheduler"]["commit"]
