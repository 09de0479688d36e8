# -*- coding: utf-8 -*-
# Apache-2.0
"""The filter over helm's release records (documentation: helm_pending_records.yml
beside this file). The rules are module_utils/helm_records.py."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import math
import time

from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.module_utils import helm_records as _records
from ansible_collections.smshare.kai.plugins.module_utils.plain import plain as _plain


def helm_pending_records(secrets, release, timeout, now=None):
    if not isinstance(secrets, list):
        raise AnsibleFilterError("helm_pending_records: expected helm's record Secrets as a list, got %s"
                                 % type(secrets).__name__)
    try:
        seconds = float(timeout)
    except (TypeError, ValueError):
        raise AnsibleFilterError("helm_pending_records: timeout %r is not a number of seconds" % (timeout,))
    if math.isnan(seconds) or seconds <= 0:
        raise AnsibleFilterError("helm_pending_records: timeout %r must be above 0" % (timeout,))
    return _records.pending(_plain(secrets), str(release), time.time() if now is None else float(now), seconds)


class FilterModule(object):
    def filters(self):
        return {"helm_pending_records": helm_pending_records}
