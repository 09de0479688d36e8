# Apache-2.0
"""The filter over module_utils/apt.py's driver_versions (its rules are tested in
tests/unit/plugins/module_utils/test_apt.py): registered name, inputs as the
nvidia_driver role passes them, refusals as AnsibleFilterError."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.filter import nvidia_driver_versions as versions

V615 = {"version": "615.71.09-0ubuntu1", "upstream": "615.71.09"}
OFFER = {"nvswitch_count": None, "installed": {},
         "apt": {"nvidia-driver-open": {"installed": None, "candidate": V615, "versions": [V615]},
                 "nvidia-fabricmanager": {"installed": None, "candidate": None, "versions": []},
                 "libnvidia-nscq": {"installed": None, "candidate": None, "versions": []}}}


def test_it_is_registered():
    assert sorted(versions.FilterModule().filters()) == ["nvidia_driver_versions"]


@pytest.mark.parametrize("branch, version, driver", [
    (615, None, "615.71.09-0ubuntu1"), ("615", None, "615.71.09-0ubuntu1"), (615, "615.71.09", "615.71.09-0ubuntu1"),
    (615, "615.80.01", ""), (580, None, ""),
], ids=["branch-number", "branch-text", "version-offered", "version-not-offered", "candidate-of-another-branch"])
def test_the_driver_of_the_branch(branch, version, driver):
    assert versions.nvidia_driver_versions(OFFER, branch, version)["driver"] == driver


@pytest.mark.parametrize("call", [
    lambda: versions.nvidia_driver_versions("not a result", 615),
    lambda: versions.nvidia_driver_versions(OFFER, 615, fabricmanager="sometimes"),
    lambda: versions.nvidia_driver_versions(OFFER, "six"),
], ids=["not-a-result", "unknown-fabricmanager-mode", "branch-not-a-number"])
def test_refusals_are_filter_errors(call):
    with pytest.raises(AnsibleFilterError):
        call()
