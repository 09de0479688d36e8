#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: registry_image_info
short_description: Read image manifests from an OCI distribution registry
version_added: 0.1.0
description:
  - Reads the manifest of each image from its registry over HTTPS, as
    C(docker buildx imagetools inspect) would, without a container engine.
  - Understands OCI image indexes, Docker manifest lists and single OCI or
    Docker image manifests, and reports per image whether it exists, its
    digest and its platforms.
  - Authenticates with HTTP basic auth or the bearer-token challenge flow
    (C(WWW-Authenticate)) that public registries use.
  - "Credentials go to the registry and its https token service only: a redirect
    to another host (a blob store) gets no C(Authorization) header, nothing is
    fetched over plain HTTP, and a token service that is not https gets no credentials."
  - An image that is not in the registry (HTTP 404) is reported with
    C(exists=false); authentication (401), permission (403), TLS and
    connection failures fail the module with a named RV(failure) and a
    message naming the image.
  - Every parameter is checked before the first request; a bad one fails
    with RV(failure=bad_input) naming it.
options:
  images:
    description:
      - Image references, C(host[:port]/path/name:tag) or C(...@sha256:...), at least one.
      - A reference without a registry host means Docker Hub.
      - "No credentials in references (C(user:password@host/...)): use O(username) and O(password)."
    type: list
    elements: str
    required: true
  platforms:
    description:
      - Platforms each image must provide, such as C(linux/amd64).
      - Each result lists the ones it lacks in RV(images[].missing_platforms).
    type: list
    elements: str
    default: []
  username:
    description:
      - User name for the registry. Without a non-empty O(password) the module
        reads anonymously.
    type: str
  password:
    description:
      - Password or token for the registry. Never logged. Empty means no credentials.
    type: str
  ca_file:
    description: PEM file with the CA that signed the registry's certificate (an absolute path that exists).
    type: path
  validate_certs:
    description: Verify the registry's TLS certificate.
    type: bool
    default: true
  timeout:
    description: Seconds to wait for each HTTP request, 1 to 3600.
    type: int
    default: 30
extends_documentation_fragment:
  - smshare.kai.attributes.info_module
author:
  - smshare.kai maintainers (@smshare)
'''

EXAMPLES = r'''
- name: Check the fork images are in the registry
  smshare.kai.registry_image_info:
    images:
      - registry.example.com/team/kai-fork/kai-scheduler/binder:smshare-44d1d0a-af0544e
    platforms: [linux/amd64, linux/arm64]
    username: "{{ registry_user }}"
    password: "{{ registry_password }}"
    ca_file: /etc/ssl/private-registry-ca.crt
  register: fork_images_found

- name: Fail on any image that is missing or lacks a platform
  ansible.builtin.assert:
    that: fork_images_found.missing | length == 0
    fail_msg: "Missing: {{ fork_images_found.missing | join(', ') }}"
'''

RETURN = r'''
images:
  description: One entry per requested image, in the order given.
  returned: success
  type: list
  elements: dict
  contains:
    image:
      description: The reference as given.
      type: str
    registry:
      description: Registry host (and port).
      type: str
    repository:
      description: Repository path inside the registry.
      type: str
    reference:
      description: Tag or digest that was looked up.
      type: str
    exists:
      description: Whether the registry has a manifest for the reference.
      type: bool
    digest:
      description: Digest of the manifest (or index), null when missing.
      type: str
      sample: sha256:6fd686a210f71c689b2a8f241ac8ad0bf5be4be818a0ce9a42d89fc43cc02f38
    media_type:
      description: Media type of the manifest, an index or list type for multi-platform images.
      type: str
    platforms:
      description: Platforms the image provides (attestation entries left out).
      type: list
      elements: str
      sample: [linux/amd64, linux/arm64]
    missing_platforms:
      description: Requested O(platforms) the image does not provide.
      type: list
      elements: str
    complete:
      description: Exists and provides every requested platform.
      type: bool
missing:
  description: The images that do not exist or lack a requested platform, with the reason.
  returned: success
  type: list
  elements: str
  sample: ["registry.example.com/kai-scheduler/binder:t (not in the registry)"]
all_present:
  description: Every image exists with every requested platform.
  returned: success
  type: bool
failure:
  description: >-
    Name of the failure: V(bad_input) (a parameter breaks a rule; RV(parameter) names it),
    V(auth) (401), V(denied) (403), V(tls), V(connect), V(http) (another answer),
    V(insecure_redirect) (a redirect to plain HTTP), V(insecure_realm) (a token
    service that is not https, with credentials).
  returned: failure
  type: str
parameter:
  description: The parameter a V(bad_input) failure is about.
  returned: failure
  type: str
image:
  description: The image being read when the registry failed.
  returned: failure
  type: str
status:
  description: HTTP status of the failed answer, when there was one.
  returned: failure
  type: int
url:
  description: URL of the failed request, without user information or query.
  returned: failure
  type: str
'''

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.smshare.kai.plugins.module_utils import validate
from ansible_collections.smshare.kai.plugins.module_utils.registry import (
    RegistryClient,
    RegistryError,
    check_image as check_reference,
)

PLATFORM_PATTERN = r"[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?"
EXAMPLE_IMAGE = "registry.example.com/team/kai-fork/kai-scheduler/binder:smshare-44d1d0a-af0544e"


def check_image(name, value):
    check_reference(name, value, EXAMPLE_IMAGE, "give them as username and password")


def check_params(params):
    validate.items("images", params["images"], "[%s]" % EXAMPLE_IMAGE, minimum=1, each=check_image)
    validate.items("platforms", params["platforms"], "[linux/amd64, linux/arm64]", minimum=0,
                   each=lambda name, value: validate.text(name, value, "linux/arm64", pattern=PLATFORM_PATTERN,
                                                          rule="must be a platform os/arch[/variant]"))
    validate.text("username", params["username"], "robot-kai", required=False, max_length=256)
    validate.text("password", params["password"], "(from a vault)", required=False, secret=True)
    if params["ca_file"] is not None:
        validate.path("ca_file", params["ca_file"], "/etc/ssl/certs/registry-ca.crt")
        if not os.path.isfile(params["ca_file"]):
            raise validate.BadInput("ca_file", params["ca_file"], "must be an existing PEM file",
                                    "/etc/ssl/certs/registry-ca.crt")
    validate.integer("timeout", params["timeout"], "30", minimum=1, maximum=3600)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            images=dict(type='list', elements='str', required=True),
            platforms=dict(type='list', elements='str', default=[]),
            username=dict(type='str'),
            password=dict(type='str', no_log=True),
            ca_file=dict(type='path'),
            validate_certs=dict(type='bool', default=True),
            timeout=dict(type='int', default=30),
        ),
        required_together=[('username', 'password')],
        supports_check_mode=True,
    )
    params = module.params
    validate.refuse_bad_input(module, check_params)
    if params['username'] and not params['password']:
        module.warn('password is empty: reading anonymously, without credentials')
    client = RegistryClient(username=params['username'], password=params['password'],
                            ca_file=params['ca_file'], validate_certs=params['validate_certs'],
                            timeout=params['timeout'])
    results = []
    for ref in params['images']:
        try:
            results.append(client.image_info(ref, params['platforms']))
        except RegistryError as exc:
            module.fail_json(msg=exc.msg, failure=exc.kind, image=exc.image, status=exc.status,
                             url=exc.url, images=results)
    missing = []
    for info in results:
        if not info['exists']:
            missing.append('%s (not in the registry)' % info['image'])
        elif info['missing_platforms']:
            missing.append('%s (lacks %s)' % (info['image'], ', '.join(info['missing_platforms'])))
    module.exit_json(changed=False, images=results, missing=missing, all_present=not missing)


if __name__ == '__main__':
    main()
