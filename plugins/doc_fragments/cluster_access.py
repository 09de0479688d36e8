# -*- coding: utf-8 -*-
# Apache-2.0
"""The cluster access options of the smshare.kai.cluster action group."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type


class ModuleDocFragment(object):

    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Kubeconfig file; default C(KUBECONFIG) or C(~/.kube/config), then the service account of the pod it runs in.
      - Like kubernetes.core's option of the same name, so one C(module_defaults) entry for the action group
        C(group/smshare.kai.cluster) sets it for every module of the group.
    type: path
  context:
    description: Kubeconfig context; default the kubeconfig's current context.
    type: str
"""
