# Apache-2.0
"""The execution environment's definition agrees with the pins the tests run
with (requirements/python.txt), is valid ansible-builder format 3, and the
collection's own EE requirements are what its plugins import."""
import re
from pathlib import Path

import yaml
from ansible_builder.user_definition import UserDefinition
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[3]


def frozen():
    lines = (REPO / "requirements" / "python.txt").read_text().splitlines()
    return {n.lower(): v for n, v in (line.split("==") for line in lines if "==" in line)}


def requirement_lines(path):
    return [Requirement(line.split("#")[0].strip()) for line in path.read_text().splitlines()
            if line.split("#")[0].strip()]


def test_definition_is_valid_format_3():
    definition = UserDefinition(str(REPO / "execution-environment.yml"))
    definition.validate()
    assert definition.version == 3


def test_every_pin_of_the_image_is_the_tested_pin():
    pins = frozen()
    ee = yaml.safe_load((REPO / "execution-environment.yml").read_text())
    pinned = [Requirement(ee["dependencies"]["ansible_core"]["package_pip"]),
              Requirement(ee["dependencies"]["ansible_runner"]["package_pip"]),
              *requirement_lines(REPO / "ee" / "requirements.txt")]
    for req in pinned:
        assert len(req.specifier) == 1 and next(iter(req.specifier)).operator == "==", "%s is not pinned" % req
        assert next(iter(req.specifier)).version == pins[req.name.lower()], \
            "%s differs from requirements/python.txt (%s)" % (req, pins[req.name.lower()])


def test_collection_requirements_cover_the_image_and_are_satisfied_by_the_pins():
    pins = frozen()
    meta = yaml.safe_load((REPO / "meta" / "execution-environment.yml").read_text())
    assert meta["version"] == 1
    collection = requirement_lines(REPO / meta["dependencies"]["python"])
    image = {r.name.lower() for r in requirement_lines(REPO / "ee" / "requirements.txt")}
    for req in collection:
        assert req.name.lower() in image, "%s is not pinned for the image in ee/requirements.txt" % req.name
        assert pins[req.name.lower()] in req.specifier, (req, pins[req.name.lower()])
    bindep = (REPO / meta["dependencies"]["system"]).read_text()
    assert re.search(r"^openssh-client \[platform:dpkg !compile\]$", bindep, re.M)


def test_galaxy_requirements_install_only_the_built_tarball_offline():
    ee = yaml.safe_load((REPO / "execution-environment.yml").read_text())
    assert ee["build_arg_defaults"]["ANSIBLE_GALAXY_CLI_COLLECTION_OPTS"] == "--no-deps --offline"
    galaxy = yaml.safe_load((REPO / ee["dependencies"]["galaxy"]).read_text())
    assert galaxy == {"collections": [{"name": "collections/smshare-kai.tar.gz", "type": "file"}]}
    # The collections smshare.kai depends on come with the pinned ansible package.
    assert "ansible" in {r.name for r in requirement_lines(REPO / "ee" / "requirements.txt")}
