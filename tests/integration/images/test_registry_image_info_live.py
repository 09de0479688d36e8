# Apache-2.0
"""registry_image_info against the real registry (Debian's docker-registry, TLS
with the test CA, htpasswd), with images pushed by buildah in all four media
types: OCI index, Docker manifest list, OCI manifest, Docker manifest."""
import base64
import hashlib
import json
import subprocess
import sys

import pytest

from conftest import REPO, base_env
from registry_state import unreadable

PLAY = """
- name: Read manifests
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Look up the images
      smshare.kai.registry_image_info:
        images: "{{ images }}"
        platforms: "{{ platforms | default([]) }}"
        username: "{{ username | default(omit) }}"
        password: "{{ password | default(omit) }}"
        ca_file: "{{ ca_file | default(omit) }}"
      register: found
    - name: Save the result
      ansible.builtin.copy:
        content: "{{ found | to_json }}"
        dest: "{{ out }}"
        mode: "0644"
      check_mode: false
"""


@pytest.fixture(scope="module")
def pushed(tmp_path_factory, image_registry):
    """Push one tiny image in each media type; returns {kind: reference}."""
    root = tmp_path_factory.mktemp("module-images")
    ctx = root / "ctx"
    ctx.mkdir()
    (ctx / "f").write_text("registry_image_info test\n")
    (ctx / "Containerfile").write_text("FROM scratch\nCOPY f /f\n")
    buildah = ["buildah", "--root", str(root / "root"), "--runroot", str(root / "run"), "--storage-driver", "vfs"]
    creds = ["--cert-dir", image_registry.cert_dir, "--creds", f"{image_registry.username}:{image_registry.password}"]
    base = image_registry.address + "/mod"
    refs = {k: f"{base}/{k}:t1" for k in ("oci-index", "docker-list", "oci-single", "docker-single")}

    def sh(*argv):
        subprocess.run(argv, check=True, capture_output=True, env=base_env())

    sh(*buildah, "build", "-q", "--platform", "linux/amd64,linux/arm64", "--manifest", "multi", str(ctx))
    sh(*buildah, "manifest", "push", "--all", *creds, "multi", "docker://" + refs["oci-index"])
    sh(*buildah, "manifest", "push", "--all", "--format", "v2s2", *creds, "multi", "docker://" + refs["docker-list"])
    sh(*buildah, "build", "-q", "--platform", "linux/arm64", "-t", "single", str(ctx))
    sh(*buildah, "push", *creds, "single", "docker://" + refs["oci-single"])
    sh(*buildah, "push", "--format", "v2s2", *creds, "single", "docker://" + refs["docker-single"])
    return refs


def run(tmp_path, *args, **params):
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    out = tmp_path / "out.json"
    params.update(out=str(out), ansible_python_interpreter=sys.executable)
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", str(play),
                           "-e", json.dumps(params), *args],
                          env=base_env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO, check=False)
    return proc, (json.loads(out.read_text()) if out.exists() else None)


def creds(registry):
    return {"username": registry.username, "password": registry.password, "ca_file": registry.ca}


def test_all_four_media_types(tmp_path, image_registry, pushed):
    missing = image_registry.address + "/mod/never-pushed:t1"
    proc, result = run(tmp_path, images=list(pushed.values()) + [missing],
                       platforms=["linux/amd64", "linux/arm64"], **creds(image_registry))
    assert proc.returncode == 0, proc.stdout
    by_image = {i["image"]: i for i in result["images"]}
    expected = {
        "oci-index": ("application/vnd.oci.image.index.v1+json", ["linux/amd64", "linux/arm64"]),
        "docker-list": ("application/vnd.docker.distribution.manifest.list.v2+json", ["linux/amd64", "linux/arm64"]),
        "oci-single": ("application/vnd.oci.image.manifest.v1+json", ["linux/arm64"]),
        "docker-single": ("application/vnd.docker.distribution.manifest.v2+json", ["linux/arm64"]),
    }
    for kind, (media_type, platforms) in expected.items():
        info = by_image[pushed[kind]]
        assert info["exists"] and info["media_type"] == media_type and info["platforms"] == platforms, info
        assert info["digest"].startswith("sha256:")
    assert by_image[missing]["exists"] is False
    assert result["missing"] == [pushed["oci-single"] + " (lacks linux/amd64)",
                                 pushed["docker-single"] + " (lacks linux/amd64)",
                                 missing + " (not in the registry)"]
    assert result["changed"] is False


def test_digest_matches_what_skopeo_sees(tmp_path, image_registry, pushed):
    proc, result = run(tmp_path, images=[pushed["oci-index"]], **creds(image_registry))
    assert proc.returncode == 0, proc.stdout
    raw = subprocess.run(["skopeo", "inspect", "--raw", "--cert-dir", image_registry.cert_dir, "--creds",
                          f"{image_registry.username}:{image_registry.password}", "docker://" + pushed["oci-index"]],
                         check=True, capture_output=True).stdout
    assert result["images"][0]["digest"] == "sha256:" + hashlib.sha256(raw).hexdigest()


def test_check_mode_reads_the_same(tmp_path, image_registry, pushed):
    proc, result = run(tmp_path, "--check", images=[pushed["docker-list"]], **creds(image_registry))
    assert proc.returncode == 0, proc.stdout
    assert result["images"][0]["exists"] is True


def test_wrong_password_is_an_auth_failure_and_never_shown(tmp_path, image_registry, pushed):
    wrong = "Not-The-Pw-91b2"
    proc, _result = run(tmp_path, "-vvv", images=[pushed["oci-index"]], username=image_registry.username,
                        password=wrong, ca_file=image_registry.ca)
    assert proc.returncode != 0
    assert "authentication failed (HTTP 401)" in proc.stdout and pushed["oci-index"] in proc.stdout
    assert wrong not in proc.stdout


def test_no_credentials_asks_for_them(tmp_path, image_registry, pushed):
    proc, _result = run(tmp_path, images=[pushed["oci-index"]], ca_file=image_registry.ca)
    assert proc.returncode != 0
    assert "authentication required (HTTP 401)" in proc.stdout


def test_untrusted_certificate_is_a_tls_failure(tmp_path, image_registry, pushed):
    proc, _result = run(tmp_path, images=[pushed["oci-index"]], username=image_registry.username,
                        password=image_registry.password)
    assert proc.returncode != 0
    assert "TLS verification failed" in proc.stdout and "give ca_file" in proc.stdout
    assert image_registry.password not in proc.stdout


def assert_failed_with_500(proc, registry, broken, message, uri, log_from):
    assert proc.returncode != 0, proc.stdout
    assert message in proc.stdout and "failure: http" in proc.stdout and "status: 500" in proc.stdout, proc.stdout
    assert f"image: {broken}" in proc.stdout and f"url: https://{registry.address}{uri}" in proc.stdout
    # the registry's own words, and what to do (the YAML callback may fold the message)
    said = " ".join(proc.stdout.split())
    assert "(UNKNOWN: unknown error): a fault in the registry itself, not a missing image or a credential " \
           "problem. Look at the registry's log for this request, and run again once it answers" in said, said[-3000:]
    # a server error is a failure, never an image reported missing
    assert "not in the registry" not in proc.stdout
    basic = base64.b64encode(f"{registry.username}:{registry.password}".encode()).decode()
    assert registry.password not in proc.stdout and basic not in proc.stdout
    # the 500 is the registry's own, from its storage
    with registry.log.open() as log:
        log.seek(log_from)
        # logrus quotes a value with a ':' in it (a digest)
        lines = [line for line in log if "http.response.status=500" in line
                 and (f"http.request.uri={uri} " in line or f'http.request.uri="{uri}"' in line)]
    assert lines and "is a directory" in lines[0], lines


def test_a_registry_that_fails_reading_a_manifest_fails_the_play_naming_the_status_and_image(
        tmp_path, image_registry, pushed):
    healthy, broken = pushed["oci-index"], pushed["oci-single"]
    log_from = image_registry.log.stat().st_size
    # the manifest's revision link: the tag resolves, its manifest cannot be read
    with unreadable(image_registry.revision_link("mod/oci-single", "t1")):
        proc, result = run(tmp_path, "-vvv", images=[healthy, broken], platforms=["linux/arm64"],
                           **creds(image_registry))
    # the healthy image read first does not turn the failure into a result
    assert result is None
    assert_failed_with_500(proc, image_registry, broken, f"registry answered HTTP 500 for {broken}",
                           "/v2/mod/oci-single/manifests/t1", log_from)
    # once the registry answers again, so does the module (and `pushed` is whole for later tests)
    proc, result = run(tmp_path, images=[healthy, broken], **creds(image_registry))
    assert proc.returncode == 0, proc.stdout
    assert [i["exists"] for i in result["images"]] == [True, True]


def test_a_registry_that_fails_reading_a_config_blob_fails_the_play_naming_the_status_and_image(
        tmp_path, image_registry, pushed):
    healthy, broken = pushed["docker-list"], pushed["docker-single"]
    repo = image_registry.repository_dir("mod/docker-single")
    raw = subprocess.run(["skopeo", "inspect", "--raw", "--cert-dir", image_registry.cert_dir, "--creds",
                          f"{image_registry.username}:{image_registry.password}", "docker://" + broken],
                         check=True, capture_output=True, env=base_env()).stdout
    config = json.loads(raw)["config"]["digest"]
    log_from = image_registry.log.stat().st_size
    # the manifest reads, the config blob it names (for the platform) does not
    with unreadable(repo / "_layers" / config.replace(":", "/") / "link"):
        proc, result = run(tmp_path, "-vvv", images=[healthy, broken], **creds(image_registry))
    assert result is None
    assert_failed_with_500(proc, image_registry, broken, f"registry answered HTTP 500 for the config blob of {broken}",
                           f"/v2/mod/docker-single/blobs/{config}", log_from)
    proc, result = run(tmp_path, images=[broken], **creds(image_registry))
    assert proc.returncode == 0, proc.stdout
    assert result["images"][0]["platforms"] == ["linux/arm64"]


def test_a_tag_deleted_from_a_repository_that_still_exists_is_reported_missing_not_failed(
        tmp_path, image_registry, pushed):
    deleted = image_registry.address + "/mod/deleted:t1"
    auth = f"{image_registry.username}:{image_registry.password}"

    def sh(*argv):
        return subprocess.run(["skopeo", *argv], check=True, capture_output=True, text=True, env=base_env()).stdout

    sh("copy", "--src-cert-dir", image_registry.cert_dir, "--dest-cert-dir", image_registry.cert_dir,
       "--src-creds", auth, "--dest-creds", auth, "docker://" + pushed["oci-single"], "docker://" + deleted)
    # the registry deletes by digest only (lab/registry.sh enables deletes): skopeo resolves the tag
    sh("delete", "--cert-dir", image_registry.cert_dir, "--creds", auth, "docker://" + deleted)
    # the repository is still there, without the tag (a never-pushed one answers NAME_UNKNOWN)
    assert json.loads(sh("list-tags", "--cert-dir", image_registry.cert_dir, "--creds", auth,
                         "docker://" + deleted.rsplit(":", 1)[0]))["Tags"] == []
    proc, result = run(tmp_path, images=[deleted, pushed["oci-index"]], **creds(image_registry))
    assert proc.returncode == 0, proc.stdout
    assert [i["exists"] for i in result["images"]] == [False, True]
    assert result["missing"] == [deleted + " (not in the registry)"] and result["all_present"] is False
