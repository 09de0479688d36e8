#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: buildx_info
short_description: Read the docker buildx builders of a build host
version_added: 0.1.0
description:
  - Runs C(docker buildx ls) and C(docker buildx inspect) and returns the
    builders, which one is current (the one C(make build) uses when
    C(BUILDX_BUILDER) is not set), and for the current builder and each one
    named in O(builders) its driver, status and full platform list.
  - Never starts a builder (no C(--bootstrap)); an inactive
    C(docker-container) builder reports RV(details.status=inactive) and no
    platforms until something boots it.
  - Fails with a named RV(failure) when docker is missing (V(docker_missing)),
    has no buildx plugin (V(buildx_missing)), the daemon does not answer
    (V(daemon_unreachable)) or the output cannot be read (V(unparsable)).
author:
  - smshare.kai maintainers (@smshare)
extends_documentation_fragment:
  - smshare.kai.attributes.info_module
options:
  builders:
    description:
      - Builders to inspect besides the current one, each with the platforms it
        must be able to build. A builder that does not exist is reported with
        RV(details.exists=false), not as a failure.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description:
          - Builder name; omitted, the current builder (the one C(make build) uses).
        type: str
      platforms:
        description:
          - Platforms (C(os/arch[/variant])) the builder must list; those it lacks
            are returned in RV(details.missing_platforms) and RV(missing_arches).
        type: list
        elements: str
        default: []
notes:
  - Platforms are normalised as the registry reports them (C(linux/arm64/v8)
    is C(linux/arm64)); the C(*) buildx puts after platforms set by hand is dropped.
seealso:
  - module: smshare.kai.registry_image_info
"""

EXAMPLES = r"""
- name: Read the current builder and the dedicated multi-platform one
  smshare.kai.buildx_info:
    builders:
      - platforms: [linux/amd64, linux/arm64]
      - name: kai-multiarch
        platforms: [linux/amd64, linux/arm64]
  register: buildx

- name: Install QEMU for the architectures the builders lack
  ansible.builtin.command:
    argv: [docker, run, --privileged, --rm, tonistiigi/binfmt, --install, "{{ buildx.missing_arches | join(',') }}"]
  changed_when: true
  when: buildx.missing_arches | length > 0
"""

RETURN = r"""
current:
  description: Name of the current builder.
  returned: success
  type: str
  sample: default
builders:
  description: Every builder C(docker buildx ls) lists, in its order.
  returned: success
  type: list
  elements: dict
  contains:
    name:
      description: Builder name.
      type: str
    driver:
      description: Driver (V(docker), V(docker-container), V(kubernetes), V(remote)).
      type: str
    current:
      description: Whether it is the current builder.
      type: bool
    status:
      description: V(running), V(inactive), V(stopped), V(error) or another node status.
      type: str
    nodes:
      description: Its nodes (name, endpoint, status, buildkit version).
      type: list
      elements: dict
  sample:
    - {name: default, driver: docker, current: true, status: running,
       nodes: [{name: default, endpoint: default, status: running, buildkit: v0.13.2}]}
details:
  description: C(docker buildx inspect) of the current builder and of each of O(builders), by name.
  returned: success
  type: dict
  contains:
    exists:
      description: Whether the builder exists.
      type: bool
    driver:
      description: Its driver.
      type: str
    status:
      description: V(running), V(inactive), V(stopped), V(error), ...
      type: str
    error:
      description: The error buildx reports for the builder or a node; null when none.
      type: str
    platforms:
      description: Every platform its nodes can build (empty while inactive).
      type: list
      elements: str
    missing_platforms:
      description: The platforms asked of it in O(builders) that it does not list.
      type: list
      elements: str
  sample:
    default: {name: default, exists: true, driver: docker, status: running, error: null,
              platforms: [linux/amd64, linux/amd64/v2, linux/amd64/v3, linux/386], missing_platforms: [],
              nodes: []}
missing_arches:
  description: >-
    Architectures of every platform a builder in O(builders) lacks, as
    C(tonistiigi/binfmt --install) takes them (C(arm64), C(arm), C(riscv64)...).
  returned: success
  type: list
  elements: str
  sample: [arm64]
failure:
  description: >-
    Name of the failure: V(bad_input), V(docker_missing), V(buildx_missing),
    V(daemon_unreachable), V(unparsable), V(failed).
  returned: failure
  type: str
cmd:
  description: The command that failed.
  returned: failure, when a command ran
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.smshare.kai.plugins.module_utils import validate
from ansible_collections.smshare.kai.plugins.module_utils.buildx import NAME_PATTERN, Buildx
from ansible_collections.smshare.kai.plugins.module_utils.registry import normalize_platform
from ansible_collections.smshare.kai.plugins.module_utils.runner import ToolError


PLATFORM_PATTERN = r"[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?"


def check_builder(name, entry):
    validate.text(name + ".name", entry.get("name"), "kai-multiarch", pattern=NAME_PATTERN, positional=True,
                  required=False, rule="must be a buildx builder name (letters, digits, '_', '.', '-')")
    validate.items(name + ".platforms", entry.get("platforms") or [], "[linux/amd64, linux/arm64]", minimum=0,
                   each=lambda item, value: validate.text(item, value, "linux/arm64", pattern=PLATFORM_PATTERN,
                                                          rule="must be a platform os/arch[/variant]"))


def check_input(params):
    """Every parameter rule, before buildx is run (raises validate.BadInput)."""
    validate.items("builders", params["builders"], "[{name: kai-multiarch}]", minimum=0, each=check_builder)


def main():
    module = AnsibleModule(
        argument_spec=dict(builders=dict(
            type="list", elements="dict", default=[],
            options=dict(name=dict(type="str"), platforms=dict(type="list", elements="str", default=[])))),
        supports_check_mode=True,
    )
    validate.refuse_bad_input(module, check_input)

    buildx = Buildx(module)
    try:
        builders = buildx.ls()
        # inspect without a name reads the builder make will use (BUILDX_BUILDER, else current)
        current = buildx.inspect()
        details = {current["name"]: current}
        for entry in module.params["builders"]:
            if entry["name"] and entry["name"] not in details:
                details[entry["name"]] = buildx.inspect(entry["name"])
    except ToolError as exc:
        module.fail_json(msg=exc.msg, **exc.details())

    arches = []
    for entry in module.params["builders"]:
        found = details[entry["name"] or current["name"]]
        lacking = [normalize_platform(p) for p in entry["platforms"]
                   if normalize_platform(p) not in found.get("platforms", [])]
        found["missing_platforms"] = sorted(set(found.get("missing_platforms", []) + lacking))
        arches += [p.split("/")[1] for p in lacking if p.split("/")[1] not in arches]
    for found in details.values():
        found.setdefault("missing_platforms", [])
    module.exit_json(changed=False, current=current["name"], builders=builders, details=details,
                     missing_arches=sorted(arches))


if __name__ == "__main__":
    main()
