#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0
# The action plugin (plugins/action/build_wait.py) does the work; this file documents it.

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: build_wait
short_description: Wait for a background build and report how far it got
version_added: 0.1.0
description:
  - Waits for a job started with C(async) and C(poll=0) (an image build) to finish, polling its status every
    O(poll_interval) seconds, up to O(timeout).
  - "Every O(report_interval) seconds it prints one line with the minutes spent, the newest build step in the
    build's log (C(docker buildx) C(#12 [builder 3/7] RUN ...), podman or buildah C(STEP 3/7: RUN ...)) and its
    last line, instead of a retry line per poll."
  - Returns the job's result (C(rc), C(stdout), C(msg) of the command that ran) without failing on it, so the
    caller can fail with the log's end; fails only when the job still runs after O(timeout).
  - Runs on the controller (an action plugin); the status and the log are read on the host that runs the build.
author:
  - smshare.kai maintainers (@smshare)
options:
  jid:
    description: The job id the async task registered (C(ansible_job_id)).
    type: str
    required: true
  log:
    description: The build's log file on the host, read for the progress lines.
    type: path
    required: true
  name:
    description: What is built, as the progress lines name it.
    type: str
    default: the build
  timeout:
    description: Seconds to wait in all.
    type: int
    required: true
  poll_interval:
    description: Seconds between two reads of the job's status.
    type: int
    required: true
  report_interval:
    description: Seconds between two progress lines (the minutes spent, the build step reached, the log's last line).
    type: int
    default: 300
extends_documentation_fragment:
  - smshare.kai.attributes
attributes:
  check_mode:
    support: partial
    details: In check mode no build ran, so the task is skipped.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: Reads only.
notes:
  - The fork_images role uses it for the forks' C(make) (C(fork_images_build_poll_interval),
    C(fork_images_build_report_interval)).
"""

EXAMPLES = r"""
- name: Build in the background
  ansible.builtin.command:
    argv: [/bin/sh, -c, 'exec make images >/var/log/build.log 2>&1']
  async: 10800
  poll: 0
  register: build

- name: Wait for it, a progress line every 5 minutes
  smshare.kai.build_wait:
    jid: "{{ build.ansible_job_id }}"
    log: /var/log/build.log
    name: kai-scheduler
    timeout: 10800
    poll_interval: 30
  register: built

- name: Check it succeeded
  ansible.builtin.assert:
    that: built.rc == 0
"""

RETURN = r"""
finished:
  description: Whether the job ended (false after the timeout).
  returned: always
  type: bool
rc:
  description: The job's exit status.
  returned: when the job ended
  type: int
elapsed:
  description: Seconds waited.
  returned: always
  type: int
"""
