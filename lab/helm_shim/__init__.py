"""The lab's `helm` command: Helm v4's engine (helm-python-sdk) behind Helm's CLI.

Lab only, never part of the collection. It implements the subcommands, flags,
environment variables and output formats that kubernetes.core's helm and
helm_info modules use, and refuses everything else with exit status 2.
"""
