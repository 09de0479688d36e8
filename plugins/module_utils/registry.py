# -*- coding: utf-8 -*-
# Apache-2.0
"""Read image manifests from an OCI distribution registry over HTTPS.

Basic auth and the bearer-token challenge flow (WWW-Authenticate), a CA file
for private registries, OCI index / Docker manifest list / OCI and Docker
image manifests. Uses ansible's open_url: no third-party dependency.

Credentials go only where they were meant to: redirects are followed here,
not by urllib (which keeps the Authorization header for any host), so the
header is dropped when a redirect leaves the host, and nothing is fetched over
plain HTTP, nor are credentials sent to a token realm that is not https.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import hashlib
import json
import re
import ssl

from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError
from ansible.module_utils.six.moves.urllib.parse import urlencode, urljoin, urlsplit, urlunsplit
from ansible.module_utils.urls import open_url

from ansible_collections.smshare.kai.plugins.module_utils import validate

try:
    from ansible.module_utils.urls import SSLValidationError
except ImportError:  # pragma: no cover - older/newer ansible-core
    SSLValidationError = None

OCI_INDEX = 'application/vnd.oci.image.index.v1+json'
DOCKER_MANIFEST_LIST = 'application/vnd.docker.distribution.manifest.list.v2+json'
OCI_MANIFEST = 'application/vnd.oci.image.manifest.v1+json'
DOCKER_MANIFEST = 'application/vnd.docker.distribution.manifest.v2+json'
INDEX_TYPES = (OCI_INDEX, DOCKER_MANIFEST_LIST)
# Without the index types a registry answers 404 for a multi-platform image.
MANIFEST_ACCEPT = ', '.join((OCI_INDEX, DOCKER_MANIFEST_LIST, OCI_MANIFEST, DOCKER_MANIFEST))

DOCKER_HUB = 'registry-1.docker.io'
# Matched with fullmatch: a trailing newline never slips past.
TAG_RE = re.compile(r'[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}')
_DIGEST_RE = re.compile(r'sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128}|'
                        r'(?!sha256:|sha512:)[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}')
_PATH_COMPONENT_RE = re.compile(r'[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*')
# host[:port] as docker's reference grammar has it: DNS labels or [IPv6], a decimal port.
_REGISTRY_RE = re.compile(r'(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*'
                          r'|\[[0-9A-Fa-f:.]+\])(?::([0-9]{1,5}))?')
_CHALLENGE_PARAM_RE = re.compile(r'(\w+)="([^"]*)"')
REDIRECTS = (301, 302, 303, 307, 308)
MAX_REDIRECTS = 5


def show_url(url):
    """A URL for messages: no user information, no query (signed blob URLs
    carry temporary credentials there)."""
    try:
        parts = urlsplit(url)
        host = parts.netloc.rsplit('@', 1)[-1]
        return urlunsplit((parts.scheme, host, parts.path, '', ''))
    except ValueError:
        return '<unreadable URL>'


def _show_ref(ref):
    return repr(re.sub(r'^[^@/]*@(?![a-z0-9]+(?:[+._-][a-z0-9]+)*:[0-9a-fA-F]{32,})', '<redacted>@',
                       ref.split('://', 1)[-1]) if isinstance(ref, str) else ref)


class RegistryError(Exception):
    """A failure talking to the registry. kind (returned as `failure`): auth,
    denied, tls, connect, http, reference, insecure_redirect or insecure_realm."""

    def __init__(self, msg, kind, image=None, status=None, url=None):
        super(RegistryError, self).__init__(msg)
        self.msg = msg
        self.kind = kind
        self.image = image
        self.status = status
        self.url = url

    def as_dict(self):
        return {'msg': self.msg, 'kind': self.kind, 'image': self.image,
                'status': self.status, 'url': self.url}


def _check_registry_host(host, value, what):
    match = _REGISTRY_RE.fullmatch(host)
    if not match or (match.group(1) is not None and not 1 <= int(match.group(1)) <= 65535):
        raise RegistryError('invalid registry %s in %s %s: expected a host name or [IPv6 address], optionally '
                            ':port (1-65535)' % (_show_ref(host), what, _show_ref(value)), 'reference', image=value)


def parse_registry_path(value):
    """Split HOST[:PORT][/PATH] (where images are pushed, no tag) into (host, path)."""
    if not isinstance(value, str) or not value or value != value.strip() or '://' in value:
        raise RegistryError('invalid registry path %s: expected host[:port]/path' % _show_ref(value),
                            'reference', image=value)
    host, path = (value.split('/', 1) + [''])[:2]
    _check_registry_host(host, value, 'registry path')
    if path and not all(_PATH_COMPONENT_RE.fullmatch(p) for p in path.split('/')):
        raise RegistryError('invalid path in registry path %s: components must be lowercase letters, digits and '
                            'separators' % _show_ref(value), 'reference', image=value)
    return host, path


def check_image(name, value, example, credentials_hint):
    """The image-reference rule of every module and role (raises validate.BadInput): text on one
    line, no user:password@ (credentials_hint says where they go instead), parse_reference's grammar."""
    validate.text(name, value, example, max_length=512)
    if validate.has_credentials(value):
        raise validate.BadInput(name, value, "must not carry credentials (user:password@); " + credentials_hint,
                                example)
    try:
        parse_reference(value)
    except RegistryError as exc:
        raise validate.BadInput(name, value, "must be an image reference host[:port]/path/name:tag or "
                                "...@sha256:<digest> (%s)" % exc.msg.split(":")[0], example)


def parse_reference(ref):
    """Split REGISTRY/REPO[:TAG|@DIGEST] into (registry, repository, reference).

    The first component is a registry when it holds a dot or a colon or is
    localhost, as docker decides; otherwise the image is on Docker Hub.
    """
    if not ref or ref != ref.strip() or '://' in ref:
        raise RegistryError('invalid image reference %s: expected host[:port]/path/name:tag' % _show_ref(ref),
                            'reference', image=ref)
    name, reference = ref, 'latest'
    if '@' in name:
        name, reference = name.split('@', 1)
        if not _DIGEST_RE.fullmatch(reference):
            raise RegistryError('invalid digest in image reference %s' % _show_ref(ref), 'reference', image=ref)
    else:
        last = name.rsplit('/', 1)[-1]
        if ':' in last:
            name, reference = name.rsplit(':', 1)
            if not TAG_RE.fullmatch(reference):
                raise RegistryError('invalid tag %r in image reference %s' % (reference, _show_ref(ref)),
                                    'reference', image=ref)
    parts = name.split('/')
    if len(parts) > 1 and ('.' in parts[0] or ':' in parts[0] or parts[0] == 'localhost'):
        registry, path = parts[0], parts[1:]
    else:
        registry, path = DOCKER_HUB, parts
        if len(path) == 1:
            path = ['library'] + path
    _check_registry_host(registry, ref, 'image reference')
    if not path or not all(_PATH_COMPONENT_RE.fullmatch(p) for p in path):
        raise RegistryError('invalid repository path in image reference %s: components must be '
                            'lowercase letters, digits and separators' % _show_ref(ref), 'reference', image=ref)
    return registry, '/'.join(path), reference


def normalize_platform(platform):
    """'linux/arm64/v8' -> 'linux/arm64' (v8 is arm64's only variant)."""
    parts = [p for p in platform.strip().split('/') if p]
    if len(parts) == 3 and parts[1] == 'arm64' and parts[2] == 'v8':
        parts = parts[:2]
    return '/'.join(parts)


def _platform_of(desc):
    if not isinstance(desc, dict):
        return None
    plat = desc.get('platform') if isinstance(desc.get('platform'), dict) else {}
    os_name = plat.get('os') or desc.get('os')
    arch = plat.get('architecture') or desc.get('architecture')
    if not os_name or not arch or os_name == 'unknown' or arch == 'unknown':
        return None  # attestation manifests carry unknown/unknown
    variant = plat.get('variant') or desc.get('variant')
    return normalize_platform('/'.join(p for p in (os_name, arch, variant) if p))


def _registry_said(body):
    """The registry's own error codes and messages (the distribution API's {"errors": [...]}), one line."""
    try:
        errors = json.loads(body.decode('utf-8')).get('errors')
    except (ValueError, UnicodeDecodeError, AttributeError):
        return ''
    said = ['%s: %s' % (e.get('code'), e.get('message')) for e in errors[:2] if isinstance(e, dict)] \
        if isinstance(errors, list) else []
    text = re.sub(r'[\x00-\x1f\x7f]+', ' ', '; '.join(said))
    return text[:200]


def _status_message(status, body, what):
    said = _registry_said(body or b'')
    message = 'registry answered HTTP %s for %s%s' % (status, what, ' (%s)' % said if said else '')
    if 500 <= status <= 599:
        message += (': a fault in the registry itself, not a missing image or a credential problem. Look at '
                    'the registry\'s log for this request, and run again once it answers')
    return message


def _parse_challenge(header):
    if not header:
        return None, {}
    scheme, _sep, rest = header.strip().partition(' ')
    return scheme.lower(), dict(_CHALLENGE_PARAM_RE.findall(rest))


def _is_tls_error(exc):
    if SSLValidationError is not None and isinstance(exc, SSLValidationError):
        return True
    if isinstance(exc, ssl.SSLError):
        return True
    reason = getattr(exc, 'reason', None)
    if isinstance(reason, ssl.SSLError):
        return True
    text = str(exc)
    return 'CERTIFICATE_VERIFY_FAILED' in text or 'SSL' in text and 'certificate' in text.lower()


class RegistryClient:
    """Reads manifests; remembers the auth that worked per registry and scope."""

    def __init__(self, username=None, password=None, ca_file=None, validate_certs=True,
                 timeout=30, opener=None):
        # Credentials are a user name with a non-empty password, or none at all.
        self.username = username if username and password else None
        self.password = password if username and password else None
        self.ca_file = ca_file or None
        self.validate_certs = validate_certs
        self.timeout = timeout
        self._open = opener or open_url
        self._auth = {}

    # -- HTTP -------------------------------------------------------------
    def _raw(self, method, url, headers, image):
        try:
            resp = self._open(url, method=method, headers=headers, timeout=self.timeout,
                              validate_certs=self.validate_certs, ca_path=self.ca_file,
                              follow_redirects='none')
            return resp.getcode(), dict((k.lower(), v) for k, v in resp.headers.items()), resp.read()
        except HTTPError as exc:
            body = exc.read() if hasattr(exc, 'read') else b''
            hdrs = dict((k.lower(), v) for k, v in (exc.headers or {}).items())
            return exc.code, hdrs, body
        except Exception as exc:  # pylint: disable=broad-except
            if _is_tls_error(exc):
                raise RegistryError(
                    'TLS verification failed for %s (%s): the registry certificate is not trusted; '
                    'give ca_file with the CA that signed it' % (show_url(url), exc), 'tls', image=image,
                    url=show_url(url))
            if isinstance(exc, (URLError, OSError)):
                raise RegistryError('cannot reach registry at %s: %s' % (show_url(url), exc), 'connect',
                                    image=image, url=show_url(url))
            raise

    def _fetch(self, method, url, headers, image):
        """_raw, following redirects itself: the Authorization header goes only
        to the host it was meant for, and never over plain HTTP."""
        origin = urlsplit(url)
        headers = dict(headers)
        for _hop in range(MAX_REDIRECTS + 1):
            status, hdrs, body = self._raw(method, url, headers, image)
            if status not in REDIRECTS:
                return status, hdrs, body, url
            location = hdrs.get('location')
            if not location:
                raise RegistryError('%s answered HTTP %s without a Location' % (show_url(url), status), 'http',
                                    image=image, status=status, url=show_url(url))
            target = urljoin(url, location)
            parts = urlsplit(target)
            if parts.scheme != 'https':
                raise RegistryError(
                    '%s redirected to %s, which is not https: refused (nothing is fetched, and no credential '
                    'sent, over plain HTTP)' % (show_url(url), show_url(target)), 'insecure_redirect',
                    image=image, status=status, url=show_url(target))
            if (parts.hostname, parts.port) != (origin.hostname, origin.port):
                headers.pop('Authorization', None)   # e.g. a blob store: it gets no registry credentials
            url = target
        raise RegistryError('more than %d redirects from %s' % (MAX_REDIRECTS, show_url(url)), 'http',
                            image=image, url=show_url(url))

    def _basic_header(self):
        token = base64.b64encode(('%s:%s' % (self.username, self.password)).encode('utf-8'))
        return 'Basic ' + token.decode('ascii')

    def _bearer_token(self, params, scope, image, registry):
        realm = params.get('realm')
        if not realm:
            raise RegistryError('registry %s sent a Bearer challenge without a realm' % registry,
                                'auth', image=image)
        if self.username and urlsplit(realm).scheme != 'https':
            raise RegistryError(
                'registry %s names the token service %s, which is not https: the credentials are never sent '
                'over plain HTTP. Fix the registry\'s token realm' % (registry, show_url(realm)),
                'insecure_realm', image=image, url=show_url(realm))
        query = {}
        if params.get('service'):
            query['service'] = params['service']
        query['scope'] = params.get('scope') or scope
        url = realm + ('&' if '?' in realm else '?') + urlencode(query)
        headers = {}
        if self.username:
            headers['Authorization'] = self._basic_header()
        status, _hdrs, body, url = self._fetch('GET', url, headers, image)
        if status in (401, 403):
            raise self._auth_error(status, registry, image, url)
        if status != 200:
            raise RegistryError('token service %s answered HTTP %s for %s' % (show_url(realm), status, image),
                                'http', image=image, status=status, url=show_url(url))
        try:
            data = json.loads(body.decode('utf-8'))
        except (ValueError, UnicodeDecodeError):
            raise RegistryError('token service %s answered something that is not JSON' % show_url(realm),
                                'http', image=image, status=status, url=show_url(url))
        token = data.get('token') or data.get('access_token') if isinstance(data, dict) else None
        if not token or not isinstance(token, str):
            raise RegistryError('token service %s answered without a token' % show_url(realm), 'auth',
                                image=image, status=status, url=show_url(url))
        return 'Bearer ' + token

    def _auth_error(self, status, registry, image, url):
        if status == 403:
            return RegistryError(
                'access denied (HTTP 403) to %s for user %s: the account may not pull from this '
                'repository' % (image, self.username or '(anonymous)'), 'denied',
                image=image, status=403, url=show_url(url))
        if not self.username:
            return RegistryError(
                'authentication required (HTTP 401) by registry %s for %s: give username and '
                'password' % (registry, image), 'auth', image=image, status=401, url=show_url(url))
        return RegistryError(
            'authentication failed (HTTP 401) at registry %s for user %s reading %s: check the '
            'username and password' % (registry, self.username, image), 'auth',
            image=image, status=401, url=show_url(url))

    def request(self, method, registry, path, image, scope, accept=None):
        url = 'https://%s%s' % (registry, path)
        headers = {}
        if accept:
            headers['Accept'] = accept
        key = (registry, scope)
        if key in self._auth:
            headers['Authorization'] = self._auth[key]
        status, hdrs, body, _final = self._fetch(method, url, headers, image)
        if status == 401 and 'Authorization' not in headers:
            scheme, params = _parse_challenge(hdrs.get('www-authenticate'))
            if scheme == 'bearer':
                auth = self._bearer_token(params, scope, image, registry)
            elif scheme == 'basic':
                if not self.username:
                    raise self._auth_error(401, registry, image, url)
                auth = self._basic_header()
            else:
                raise RegistryError('registry %s asked for unsupported authentication %r' %
                                    (registry, hdrs.get('www-authenticate')), 'auth',
                                    image=image, status=401, url=show_url(url))
            self._auth[key] = auth
            headers['Authorization'] = auth
            status, hdrs, body, _final = self._fetch(method, url, headers, image)
        if status in (401, 403):
            raise self._auth_error(status, registry, image, url)
        return status, hdrs, body, url

    # -- Manifests --------------------------------------------------------
    def image_info(self, ref, platforms=None):
        """Facts about one image: exists, digest, media_type, platforms, missing_platforms."""
        registry, repository, reference = parse_reference(ref)
        scope = 'repository:%s:pull' % repository
        result = {'image': ref, 'registry': registry, 'repository': repository,
                  'reference': reference, 'exists': False, 'digest': None,
                  'media_type': None, 'platforms': []}
        status, hdrs, body, url = self.request(
            'GET', registry, '/v2/%s/manifests/%s' % (repository, reference), ref, scope,
            accept=MANIFEST_ACCEPT)
        if status == 404:
            return self._with_missing(result, platforms)
        if status != 200:
            raise RegistryError(_status_message(status, body, ref), 'http', image=ref, status=status,
                                url=show_url(url))
        try:
            manifest = json.loads(body.decode('utf-8'))
        except (ValueError, UnicodeDecodeError):
            raise RegistryError('manifest of %s is not JSON' % ref, 'http', image=ref,
                                status=status, url=show_url(url))
        if not isinstance(manifest, dict):
            raise RegistryError('manifest of %s is not a JSON object' % ref, 'http', image=ref,
                                status=status, url=show_url(url))
        media_type = manifest.get('mediaType') or hdrs.get('content-type', '').split(';')[0]
        result.update(exists=True, media_type=media_type,
                      digest=hdrs.get('docker-content-digest') or
                      'sha256:' + hashlib.sha256(body).hexdigest())
        if media_type in INDEX_TYPES or 'manifests' in manifest:
            entries = manifest.get('manifests')
            found = [_platform_of(m) for m in entries] if isinstance(entries, list) else []
            result['platforms'] = sorted(set(p for p in found if p))
        else:
            result['platforms'] = self._config_platform(registry, repository, manifest, ref, scope)
        return self._with_missing(result, platforms)

    def _config_platform(self, registry, repository, manifest, ref, scope):
        config = manifest.get('config') if isinstance(manifest.get('config'), dict) else {}
        digest = config.get('digest')
        if not digest or not isinstance(digest, str) or not _DIGEST_RE.fullmatch(digest):
            return []
        status, _hdrs, body, url = self.request(
            'GET', registry, '/v2/%s/blobs/%s' % (repository, digest), ref, scope)
        if status != 200:
            raise RegistryError(_status_message(status, body, 'the config blob of ' + ref), 'http', image=ref,
                                status=status, url=show_url(url))
        try:
            plat = _platform_of(json.loads(body.decode('utf-8')))
        except (ValueError, UnicodeDecodeError):
            return []
        return [plat] if plat else []

    @staticmethod
    def _with_missing(result, platforms):
        wanted = [normalize_platform(p) for p in (platforms or [])]
        if result['exists']:
            result['missing_platforms'] = [p for p in wanted if p not in result['platforms']]
        else:
            result['missing_platforms'] = wanted
        result['complete'] = result['exists'] and not result['missing_platforms']
        return result
