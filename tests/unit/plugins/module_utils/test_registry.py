# Apache-2.0
"""RegistryClient against an in-memory registry that answers as the real ones do.

FakeRegistry routes (method, url) to canned answers and records every request,
so each case asserts both the result and the HTTP conversation (auth flow,
Accept header, token request).
"""
import base64
import hashlib
import io
import json
import ssl

import pytest

from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError

from ansible_collections.smshare.kai.plugins.module_utils import registry as reg

HOST = "reg.example.com:5000"
USER, PASSWORD = "alice", "s3cret-pw"
BASIC = "Basic " + base64.b64encode(("%s:%s" % (USER, PASSWORD)).encode()).decode()


class Response:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def getcode(self):
        return self.status

    def read(self):
        return self.body


class FakeRegistry:
    """auth: None, 'basic' or 'bearer'. manifests: {(repo, ref): (media_type, body_dict)}."""

    def __init__(self, auth="basic", manifests=None, blobs=None, deny=(), token_status=200):
        self.auth = auth
        self.manifests = manifests or {}
        self.blobs = blobs or {}
        self.deny = set(deny)
        self.token_status = token_status
        self.requests = []

    def _error(self, url, code, headers=None, body=b"{}"):
        raise HTTPError(url, code, "error", headers or {}, io.BytesIO(body))

    def __call__(self, url, method="GET", headers=None, **kwargs):
        headers = dict(headers or {})
        self.requests.append({"method": method, "url": url, "headers": headers, "kwargs": kwargs})
        if url.startswith("https://auth.example.com/token"):
            if headers.get("Authorization") != BASIC or self.token_status != 200:
                self._error(url, self.token_status if self.token_status != 200 else 401)
            return Response(200, {}, json.dumps({"token": "tok-123"}).encode())
        path = url.split(HOST, 1)[1]
        given = headers.get("Authorization")
        if self.auth == "basic" and given != BASIC:
            self._error(url, 401, {"Www-Authenticate": 'Basic realm="lab"'})
        if self.auth == "bearer" and given != "Bearer tok-123":
            self._error(url, 401, {"WWW-Authenticate": 'Bearer realm="https://auth.example.com/token",'
                                                       'service="reg",scope="repository:%s:pull"'
                                                       % path[4:].split("/manifests/")[0]})
        repo_ref = path[len("/v2/"):]
        if "/manifests/" in repo_ref:
            repo, ref = repo_ref.split("/manifests/")
            if repo in self.deny:
                self._error(url, 403)
            found = self.manifests.get((repo, ref))
            if not found:
                self._error(url, 404, body=b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}')
            media_type, doc = found
            if media_type not in headers.get("Accept", ""):
                self._error(url, 404, body=b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}')
            body = json.dumps(doc).encode()
            digest = "sha256:" + hashlib.sha256(body).hexdigest()
            return Response(200, {"Content-Type": media_type, "Docker-Content-Digest": digest}, body)
        if "/blobs/" in repo_ref:
            digest = repo_ref.split("/blobs/")[1]
            if digest not in self.blobs:
                self._error(url, 404)
            return Response(200, {}, json.dumps(self.blobs[digest]).encode())
        self._error(url, 404)


def index(media_type, platforms):
    manifests = []
    for plat in platforms:
        parts = plat.split("/")
        entry = {"os": parts[0], "architecture": parts[1]}
        if len(parts) > 2:
            entry["variant"] = parts[2]
        manifests.append({"mediaType": reg.OCI_MANIFEST, "digest": "sha256:" + "1" * 64,
                          "size": 1, "platform": entry})
    return (media_type, {"schemaVersion": 2, "mediaType": media_type, "manifests": manifests})


def single(media_type, config_digest):
    return (media_type, {"schemaVersion": 2, "mediaType": media_type,
                         "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                    "digest": config_digest, "size": 10}, "layers": []})


def client(fake, **kw):
    kw.setdefault("username", USER)
    kw.setdefault("password", PASSWORD)
    return reg.RegistryClient(opener=fake, **kw)


@pytest.mark.parametrize("ref, expected", [
    ("reg.example.com:5000/team/kai-fork/kai-scheduler/binder:smshare-44d1d0a-af0544e",
     ("reg.example.com:5000", "team/kai-fork/kai-scheduler/binder", "smshare-44d1d0a-af0544e")),
    ("localhost/a/b", ("localhost", "a/b", "latest")),
    ("127.0.0.1:5443/x/y@sha256:" + "a" * 64, ("127.0.0.1:5443", "x/y", "sha256:" + "a" * 64)),
    ("busybox:1.36", (reg.DOCKER_HUB, "library/busybox", "1.36")),
    ("tonistiigi/binfmt", (reg.DOCKER_HUB, "tonistiigi/binfmt", "latest")),
])
def test_parse_reference(ref, expected):
    assert reg.parse_reference(ref) == expected


@pytest.mark.parametrize("ref", ["https://reg.example.com/a:b", "reg.example.com/A/b:t", "reg.example.com/a:b@c",
                                 "reg.example.com/a:-bad", "", " reg.example.com/a:t", "reg.example.com/a:b\n",
                                 "reg.example.com/a\n/b:t", "reg.example.com/a@sha256:zz",
                                 "reg.example.com/a@sha256:" + "a" * 63,
                                 # the registry's port: decimal, 1-65535; the host: DNS labels or [IPv6]
                                 "reg.example.com:99999/a:t", "reg.example.com:0/a:t", "reg.example.com:x/a:t",
                                 "reg.example.com:/a:t", "reg_x.example.com/a:t", "-reg.example.com/a:t",
                                 "reg.example.com/a#b:t"])
def test_parse_reference_rejects(ref):
    with pytest.raises(reg.RegistryError) as err:
        reg.parse_reference(ref)
    assert err.value.kind == "reference"


def test_oci_index_with_basic_auth_reports_platforms_without_attestations():
    fake = FakeRegistry(manifests={("kai/binder", "t1"): index(
        reg.OCI_INDEX, ["linux/amd64", "linux/arm64/v8", "unknown/unknown"])})
    info = client(fake).image_info(HOST + "/kai/binder:t1", ["linux/amd64", "linux/arm64"])
    assert info["exists"] and info["complete"]
    assert info["platforms"] == ["linux/amd64", "linux/arm64"]
    assert info["media_type"] == reg.OCI_INDEX
    assert info["digest"].startswith("sha256:")
    first, second = fake.requests
    assert "Authorization" not in first["headers"]          # challenge first
    assert second["headers"]["Authorization"] == BASIC
    for media_type in (reg.OCI_INDEX, reg.DOCKER_MANIFEST_LIST, reg.OCI_MANIFEST, reg.DOCKER_MANIFEST):
        assert media_type in second["headers"]["Accept"]


def test_basic_auth_is_remembered_per_repository():
    fake = FakeRegistry(manifests={("kai/binder", "t1"): index(reg.OCI_INDEX, ["linux/amd64"])})
    c = client(fake)
    c.image_info(HOST + "/kai/binder:t1")
    c.image_info(HOST + "/kai/binder:t1")
    assert len(fake.requests) == 3


def test_docker_manifest_list_and_missing_platform():
    fake = FakeRegistry(manifests={("kai/mpsd", "t1"): index(reg.DOCKER_MANIFEST_LIST, ["linux/amd64"])})
    info = client(fake).image_info(HOST + "/kai/mpsd:t1", ["linux/amd64", "linux/arm64"])
    assert info["exists"] and not info["complete"]
    assert info["missing_platforms"] == ["linux/arm64"]


@pytest.mark.parametrize("media_type", [reg.OCI_MANIFEST, reg.DOCKER_MANIFEST])
def test_single_manifest_platform_comes_from_the_config_blob(media_type):
    cfg = "sha256:" + "c" * 64
    fake = FakeRegistry(manifests={("kai/op", "t1"): single(media_type, cfg)},
                        blobs={cfg: {"os": "linux", "architecture": "arm64", "variant": "v8"}})
    info = client(fake).image_info(HOST + "/kai/op:t1", ["linux/arm64"])
    assert info["platforms"] == ["linux/arm64"] and info["complete"]
    assert fake.requests[-1]["url"].endswith("/v2/kai/op/blobs/" + cfg)


def test_missing_image_is_not_an_error():
    info = client(FakeRegistry()).image_info(HOST + "/kai/none:t1", ["linux/amd64"])
    assert info == {"image": HOST + "/kai/none:t1", "registry": HOST, "repository": "kai/none",
                    "reference": "t1", "exists": False, "digest": None, "media_type": None,
                    "platforms": [], "missing_platforms": ["linux/amd64"], "complete": False}


def test_bearer_challenge_flow():
    fake = FakeRegistry(auth="bearer", manifests={("kai/binder", "t1"): index(reg.OCI_INDEX, ["linux/amd64"])})
    info = client(fake).image_info(HOST + "/kai/binder:t1")
    assert info["exists"]
    token_req = fake.requests[1]
    assert token_req["url"] == ("https://auth.example.com/token?service=reg&"
                                "scope=repository%3Akai%2Fbinder%3Apull")
    assert token_req["headers"]["Authorization"] == BASIC
    assert fake.requests[2]["headers"]["Authorization"] == "Bearer tok-123"


def test_bearer_token_refused_is_an_auth_error():
    fake = FakeRegistry(auth="bearer", token_status=401)
    with pytest.raises(reg.RegistryError) as err:
        client(fake).image_info(HOST + "/kai/binder:t1")
    assert err.value.kind == "auth" and err.value.status == 401
    assert "authentication failed (HTTP 401)" in err.value.msg


def test_wrong_password_names_user_and_image_not_password():
    fake = FakeRegistry(manifests={("kai/binder", "t1"): index(reg.OCI_INDEX, ["linux/amd64"])})
    with pytest.raises(reg.RegistryError) as err:
        client(fake, password="wrong-pw").image_info(HOST + "/kai/binder:t1")
    e = err.value
    assert (e.kind, e.status) == ("auth", 401)
    assert USER in e.msg and HOST + "/kai/binder:t1" in e.msg and "check the username and password" in e.msg
    assert "wrong-pw" not in json.dumps(e.as_dict())


def test_no_credentials_asks_for_them():
    with pytest.raises(reg.RegistryError) as err:
        reg.RegistryClient(opener=FakeRegistry()).image_info(HOST + "/kai/binder:t1")
    assert "authentication required (HTTP 401)" in err.value.msg and "give username and password" in err.value.msg


def test_forbidden_is_its_own_message():
    fake = FakeRegistry(deny=["kai/binder"])
    with pytest.raises(reg.RegistryError) as err:
        client(fake).image_info(HOST + "/kai/binder:t1")
    assert (err.value.kind, err.value.status) == ("denied", 403)
    assert "access denied (HTTP 403)" in err.value.msg


@pytest.mark.parametrize("exc", [
    URLError(ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")),
    ssl.SSLError(1, "bad handshake"),
])
def test_tls_failure_is_its_own_message(exc):
    def opener(url, **kwargs):
        raise exc
    with pytest.raises(reg.RegistryError) as err:
        client(opener).image_info(HOST + "/kai/binder:t1")
    assert err.value.kind == "tls"
    assert "TLS verification failed" in err.value.msg and "ca_file" in err.value.msg


def test_unreachable_registry():
    def opener(url, **kwargs):
        raise URLError(ConnectionRefusedError(111, "Connection refused"))
    with pytest.raises(reg.RegistryError) as err:
        client(opener).image_info(HOST + "/kai/binder:t1")
    assert err.value.kind == "connect" and "cannot reach registry" in err.value.msg


def test_ca_file_and_validate_certs_reach_open_url():
    fake = FakeRegistry(manifests={("kai/binder", "t1"): index(reg.OCI_INDEX, ["linux/amd64"])})
    client(fake, ca_file="/etc/lab/ca.crt", validate_certs=True).image_info(HOST + "/kai/binder:t1")
    assert all(r["kwargs"]["ca_path"] == "/etc/lab/ca.crt" and r["kwargs"]["validate_certs"]
               for r in fake.requests)


def test_server_error_names_status_and_image():
    def opener(url, **kwargs):
        raise HTTPError(url, 500, "boom", {}, io.BytesIO(b""))
    with pytest.raises(reg.RegistryError) as err:
        reg.RegistryClient(opener=opener).image_info(HOST + "/kai/binder:t1")
    assert err.value.status == 500 and "HTTP 500" in err.value.msg and "kai/binder:t1" in err.value.msg


@pytest.mark.parametrize("status, body, words, absent", [
    pytest.param(500, b'{"errors":[{"code":"UNKNOWN","message":"unknown error","detail":{"x":1}}]}',
                 ["registry answered HTTP 500 for " + HOST + "/kai/binder:t1 (UNKNOWN: unknown error): a fault in the "
                  "registry itself", "Look at the registry's log for this request, and run again once it answers"],
                 ["detail"], id="500-with-the-registrys-error"),
    pytest.param(503, b"<html>Service Unavailable</html>", ["HTTP 503 for " + HOST + "/kai/binder:t1: a fault"], ["html"],
                 id="503-not-json"),
    pytest.param(400, b'{"errors":[{"code":"NAME_INVALID","message":"invalid\\nrepository name"}]}',
                 ["HTTP 400 for " + HOST + "/kai/binder:t1 (NAME_INVALID: invalid repository name)"], ["a fault", "\n"],
                 id="400-the-registrys-words-on-one-line"),
])
def test_an_error_status_names_what_the_registry_said_and_a_5xx_says_what_to_do(status, body, words, absent):
    def opener(url, **kwargs):
        raise HTTPError(url, status, "x", {}, io.BytesIO(body))
    with pytest.raises(reg.RegistryError) as err:
        reg.RegistryClient(opener=opener).image_info(HOST + "/kai/binder:t1")
    for word in words:
        assert word in err.value.msg, (word, err.value.msg)
    for word in absent:
        assert word not in err.value.msg, (word, err.value.msg)


# ---------------------------------------------------------------- credentials go only where they belong
class Redirecting(FakeRegistry):
    """The registry answers config blobs with a redirect (as registries backed
    by object stores do); `blob_host` answers them without any auth."""

    def __init__(self, location, **kw):
        super().__init__(**kw)
        self.location = location

    def __call__(self, url, method="GET", headers=None, **kwargs):
        if "/blobs/" in url and HOST in url:
            self.requests.append({"method": method, "url": url, "headers": dict(headers or {}), "kwargs": kwargs})
            given = (headers or {}).get("Authorization")
            if given != BASIC:
                self._error(url, 401, {"Www-Authenticate": 'Basic realm="lab"'})
            digest = url.split("/blobs/")[1]
            self._error(self.location.format(digest=digest), 307, {"Location": self.location.format(digest=digest)})
        if HOST not in url and not url.startswith("https://auth.example.com"):
            self.requests.append({"method": method, "url": url, "headers": dict(headers or {}), "kwargs": kwargs})
            digest = url.split("/")[-1].split("?")[0]
            return Response(200, {}, json.dumps(self.blobs[digest]).encode())
        return super().__call__(url, method=method, headers=headers, **kwargs)


def single_image_registry(location):
    cfg = "sha256:" + "c" * 64
    return Redirecting(location, manifests={("kai/op", "t1"): single(reg.OCI_MANIFEST, cfg)},
                       blobs={cfg: {"os": "linux", "architecture": "amd64"}})


def test_redirect_to_another_host_drops_the_credentials():
    fake = single_image_registry("https://blobs.example.net/store/{digest}?X-Amz-Signature=s1gned")
    info = client(fake).image_info(HOST + "/kai/op:t1", ["linux/amd64"])
    assert info["complete"]
    blob_store = [r for r in fake.requests if "blobs.example.net" in r["url"]]
    assert len(blob_store) == 1 and "Authorization" not in blob_store[0]["headers"]
    assert all(r["kwargs"]["follow_redirects"] == "none" for r in fake.requests)   # never urllib's own


def test_redirect_on_the_same_host_keeps_the_credentials():
    fake = single_image_registry("https://" + HOST + "/store/{digest}")
    fake_same = [None]

    def opener(url, method="GET", headers=None, **kwargs):
        if "/store/" in url:
            fake_same[0] = dict(headers or {})
            return Response(200, {}, json.dumps({"os": "linux", "architecture": "amd64"}).encode())
        return fake(url, method=method, headers=headers, **kwargs)
    client(opener).image_info(HOST + "/kai/op:t1")
    assert fake_same[0]["Authorization"] == BASIC


def test_redirect_to_plain_http_is_refused_before_any_request_there():
    fake = single_image_registry("http://blobs.example.net/store/{digest}")
    with pytest.raises(reg.RegistryError) as err:
        client(fake).image_info(HOST + "/kai/op:t1")
    assert err.value.kind == "insecure_redirect" and "not https" in err.value.msg
    assert not any(r["url"].startswith("http://") for r in fake.requests)


def test_signed_query_of_a_redirect_is_never_in_a_message():
    fake = single_image_registry("http://blobs.example.net/store/{digest}?X-Amz-Signature=s1gned")
    with pytest.raises(reg.RegistryError) as err:
        client(fake).image_info(HOST + "/kai/op:t1")
    assert "s1gned" not in json.dumps(err.value.as_dict())


def test_endless_redirects_end():
    def opener(url, **kwargs):
        raise HTTPError(url, 302, "Found", {"Location": "/v2/loop"}, io.BytesIO(b""))
    with pytest.raises(reg.RegistryError) as err:
        client(opener).image_info(HOST + "/kai/binder:t1")
    assert err.value.kind == "http" and "redirects" in err.value.msg


@pytest.mark.parametrize("realm", ["http://auth.example.com/token", "ftp://auth.example.com/token"])
def test_credentials_never_go_to_a_token_realm_that_is_not_https(realm):
    sent = []

    def opener(url, method="GET", headers=None, **kwargs):
        sent.append((url, dict(headers or {})))
        raise HTTPError(url, 401, "no", {"WWW-Authenticate": 'Bearer realm="%s",service="reg"' % realm},
                        io.BytesIO(b""))
    with pytest.raises(reg.RegistryError) as err:
        client(opener).image_info(HOST + "/kai/binder:t1")
    assert err.value.kind == "insecure_realm" and "never sent over plain HTTP" in err.value.msg
    assert [u for u, _h in sent] == ["https://%s/v2/kai/binder/manifests/t1" % HOST]
    assert not any("Authorization" in h for _u, h in sent)


def test_anonymous_token_from_an_http_realm_carries_no_credentials():
    sent = []

    def opener(url, method="GET", headers=None, **kwargs):
        sent.append((url, dict(headers or {})))
        if url.startswith("http://auth"):
            return Response(200, {}, b'{"token": "anon"}')
        if (headers or {}).get("Authorization") == "Bearer anon":
            raise HTTPError(url, 404, "nf", {}, io.BytesIO(b"{}"))
        raise HTTPError(url, 401, "no", {"WWW-Authenticate": 'Bearer realm="http://auth.example.com/t"'},
                        io.BytesIO(b""))
    info = reg.RegistryClient(opener=opener).image_info(HOST + "/kai/binder:t1")
    assert info["exists"] is False
    assert "Authorization" not in sent[1][1]


@pytest.mark.parametrize("username, password", [(USER, ""), (USER, None), ("", PASSWORD), (None, PASSWORD)])
def test_half_or_empty_credentials_are_no_credentials(username, password):
    fake = FakeRegistry(manifests={("kai/binder", "t1"): index(reg.OCI_INDEX, ["linux/amd64"])})
    with pytest.raises(reg.RegistryError) as err:
        reg.RegistryClient(username=username, password=password, opener=fake).image_info(HOST + "/kai/binder:t1")
    assert "authentication required (HTTP 401)" in err.value.msg
    assert not any("Authorization" in r["headers"] for r in fake.requests)
    assert "None" not in json.dumps(fake.requests)


@pytest.mark.parametrize("body", [b"[]", b"\xff\xfe", b'{"manifests": "x", "mediaType": "application/vnd.oci.image.index.v1+json"}',
                                  b'{"manifests": [1, null, {"platform": "x"}]}', b'{"config": [1]}'])
def test_odd_manifests_are_named_failures_or_empty_never_a_crash(body):
    def opener(url, method="GET", headers=None, **kwargs):
        if not headers or "Authorization" not in headers:
            raise HTTPError(url, 401, "no", {"Www-Authenticate": 'Basic realm="x"'}, io.BytesIO(b""))
        return Response(200, {"Content-Type": reg.OCI_MANIFEST}, body)
    try:
        info = client(opener).image_info(HOST + "/kai/binder:t1", ["linux/amd64"])
    except reg.RegistryError as exc:
        assert exc.kind == "http"
    else:
        assert info["platforms"] == [] and info["complete"] is False


@pytest.mark.parametrize("value, expected", [
    ("harbor.corp.internal/team/kai-fork", ("harbor.corp.internal", "team/kai-fork")),
    ("127.0.0.1:5443/smshare", ("127.0.0.1:5443", "smshare")),
    ("[::1]:5000/a", ("[::1]:5000", "a")),
    ("localhost:65535", ("localhost:65535", "")),
])
def test_parse_registry_path(value, expected):
    assert reg.parse_registry_path(value) == expected


@pytest.mark.parametrize("value", ["", "https://h/a", "h:99999/a", "h:0/a", "h:abc/a", "h/a/", "h/A", "h/a:t",
                                   "h/a@sha256:" + "a" * 64, " h/a", "h/a\n", "u:p@h/a", "h//a", None, 5000])
def test_parse_registry_path_rejects(value):
    with pytest.raises(reg.RegistryError) as err:
        reg.parse_registry_path(value)
    assert err.value.kind == "reference"


@pytest.mark.parametrize("ref", ["https://alice:s3cret@reg.example.com/a:b", "alice:s3cret@reg.example.com/a:b",
                                 "alice:s3cret@reg.example.com:5000/a"])
def test_reference_errors_never_echo_credentials(ref):
    with pytest.raises(reg.RegistryError) as err:
        (reg.parse_registry_path if ref.endswith(":5000/a") else reg.parse_reference)(ref)
    assert "s3cret" not in err.value.msg
