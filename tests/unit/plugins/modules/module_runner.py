# Apache-2.0
"""Run a module's main() in-process and return what it exited with."""
import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args


class Done(Exception):
    """exit_json / fail_json as an exception: .result (the keyword arguments), .failed."""

    def __init__(self, result, failed):
        super().__init__(result)
        self.result, self.failed = result, failed


def run_module(monkeypatch, main, args):
    def exit_json(self, **kwargs):
        raise Done(kwargs, False)

    def fail_json(self, **kwargs):
        raise Done(kwargs, True)

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)
    with patch_module_args(args):
        with pytest.raises(Done) as done:
            main()
    return done.value
