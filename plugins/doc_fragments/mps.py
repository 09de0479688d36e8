# -*- coding: utf-8 -*-
# Apache-2.0
"""The options every smshare.kai MPS module takes. Their defaults are the
constants of plugins/module_utils/mps.py (a unit test keeps them equal)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type


class ModuleDocFragment(object):

    DOCUMENTATION = r"""
options:
  pipe_directory:
    description:
      - C(CUDA_MPS_PIPE_DIRECTORY) of the control daemon (its control socket and pid file;
        MPS v3 namespaces get a directory below it).
      - An absolute path without C(.), C(..), C(//) or control characters; the gpu-fractioning
        mpsd uses V(/run/nvidia-mps).
    type: path
    default: /tmp/nvidia-mps
  log_directory:
    description:
      - C(CUDA_MPS_LOG_DIRECTORY) of the control daemon (C(control.log), C(server.log)).
      - An absolute path without C(.), C(..), C(//) or control characters.
    type: path
    default: /var/log/nvidia-mps
"""
