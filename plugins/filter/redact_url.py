# -*- coding: utf-8 -*-
# Apache-2.0
"""Filter redact_url (documentation: redact_url.yml beside this file)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.smshare.kai.plugins.module_utils.validate import redact_url


class FilterModule(object):
    def filters(self):
        return {"redact_url": redact_url}
