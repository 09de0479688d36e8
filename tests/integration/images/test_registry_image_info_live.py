# Apache-2.0
"""registry_image_info against the real registry (Debian's docker-registry, TLS
with the test CA, htpasswd), with images pushed by buildah in all four media
types: OCI index, Docker manifest list, OCI manifest, Docker manifest."""
import hashlib
import json
import subprocess
import sys

import pytest

from conftest import REPO, base_env

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
