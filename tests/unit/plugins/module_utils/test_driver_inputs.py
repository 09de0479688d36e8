# Apache-2.0
"""module_utils/driver_inputs.py: the nvidia_driver role's input rules, and the
filter the role calls them through. The bad inputs are the Molecule scenario's
own list (molecule/nvidia_driver_fresh/vars/bad_inputs.yml), less the cases the
role's argument_specs refuses first."""
from pathlib import Path

import pytest
import yaml

from ansible.errors import AnsibleFilterError
from ansible_collections.smshare.kai.plugins.filter.nvidia_driver_inputs import nvidia_driver_input_problems
from ansible_collections.smshare.kai.plugins.module_utils import driver_inputs

REPO = Path(__file__).resolve().parents[4]
DEFAULTS = yaml.safe_load((REPO / "roles" / "nvidia_driver" / "defaults" / "main.yml").read_text())
CASES = yaml.safe_load((REPO / "molecule" / "nvidia_driver_fresh" / "vars" / "bad_inputs.yml").read_text())
# Refused by argument_specs (type or choices) before the rules run.
BY_ARGUMENT_SPECS = {"branch not a number", "unsupported distro", "fabric manager mode unknown",
                     "reboot not a boolean"}
RULED = [case for case in CASES["bad_input_cases"] if case["id"] not in BY_ARGUMENT_SPECS]
NAMES = ("nvidia_driver_branch", "nvidia_driver_keyring_version", "nvidia_driver_reboot_timeout",
         "nvidia_driver_fabricmanager_settle_seconds")
MIRROR = "https://mirror.example.com/cuda"


def inputs(**given):
    values = {name: DEFAULTS[name] for name in NAMES}
    values.update(given)
    return values


def no_file(path):
    return False


def test_the_role_defaults_break_no_rule():
    assert driver_inputs.problems(inputs()) == []


def test_a_mirror_with_a_login_over_https_breaks_no_rule():
    assert driver_inputs.problems(inputs(nvidia_driver_repo_mirror_url=MIRROR,
                                         nvidia_driver_repo_mirror_username="cuda-reader",
                                         nvidia_driver_repo_mirror_password="t0k3n-x"),) == []


@pytest.mark.parametrize("case", RULED, ids=[case["id"] for case in RULED])
def test_each_bad_input_of_the_molecule_scenario_is_named(case):
    found = driver_inputs.problems(inputs(**case["vars"]), is_file=no_file)
    text = " ".join(found)
    assert found and all(message.endswith("Nothing was changed.") for message in found), found
    assert [word for word in case["words"] if word not in text] == [], text
    assert [secret for secret in case.get("hidden", []) if secret in text] == [], text


def test_a_message_names_the_variable_the_rule_and_an_example():
    assert driver_inputs.problems(inputs(nvidia_driver_version="580.95.05")) == [
        "nvidia_driver_version='580.95.05': must be an upstream version of branch 615 (no Debian revision). "
        "For example: 615.71.09. Nothing was changed."]


def test_every_broken_rule_is_named_at_once():
    found = driver_inputs.problems(inputs(nvidia_driver_branch=0, nvidia_driver_reboot_timeout=0,
                                          nvidia_driver_fabricmanager_settle_seconds=-1))
    assert [message.split("=")[0] for message in found] == [
        "nvidia_driver_branch", "nvidia_driver_reboot_timeout", "nvidia_driver_fabricmanager_settle_seconds"]


def test_a_url_with_credentials_is_not_also_called_a_bad_url():
    found = driver_inputs.problems(inputs(nvidia_driver_repo_mirror_url="https://u:p@mirror.example.com/cuda"))
    assert len(found) == 1 and "must not carry credentials" in found[0] and "u:p" not in found[0]


@pytest.mark.parametrize("value, ok", [("615", True), (615, True), ("615.0", True), (615.9, True),
                                       ("r615", False), (None, False), (0, False), (-1, False)])
def test_numbers_are_read_as_jinja_s_int_filter_reads_them(value, ok):
    assert (driver_inputs.as_int(value) >= 1) is ok


def test_values_are_read_as_text_as_ansible_s_regex_test_reads_them():
    """A vault variable holding digits templates to a number; a version may be written unquoted."""
    assert driver_inputs.problems(inputs(nvidia_driver_repo_mirror_url=MIRROR,
                                         nvidia_driver_repo_mirror_username=4711,
                                         nvidia_driver_repo_mirror_password=12345678,
                                         nvidia_driver_version=615.71)) == []


def test_a_keyring_deb_must_exist_on_the_controller(tmp_path):
    deb = tmp_path / "cuda-keyring_1.1-1_all.deb"
    assert driver_inputs.problems(inputs(nvidia_driver_keyring_deb=str(deb))) != []
    deb.write_bytes(b"!<arch>\n")
    assert driver_inputs.problems(inputs(nvidia_driver_keyring_deb=str(deb))) == []


def test_the_filter_leaves_out_what_was_given_as_omit():
    omit = object()
    assert nvidia_driver_input_problems(inputs(nvidia_driver_version=omit, nvidia_driver_repo_mirror_url=omit),
                                        omit) == []
    placeholder = "__omit_place_holder__0123abcd"
    assert nvidia_driver_input_problems(inputs(nvidia_driver_reboot_command=placeholder), placeholder) == []
    assert nvidia_driver_input_problems(inputs(nvidia_driver_reboot_command=""), placeholder) != []


def test_the_filter_refuses_what_is_not_a_mapping():
    with pytest.raises(AnsibleFilterError, match="the role's variables by name"):
        nvidia_driver_input_problems(["nvidia_driver_branch"])
