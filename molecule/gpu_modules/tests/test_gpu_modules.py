# Apache-2.0
"""State the converge leaves on the node (testinfra)."""


def test_daemon_runs_with_v3_multiuser_and_config(host):
    pid = host.file("/run/nvidia-mps/nvidia-cuda-mps-control.pid").content_string.strip()
    cmdline = host.file("/proc/%s/cmdline" % pid).content_string.split("\0")
    assert "-p" in cmdline and "3" in cmdline and "-m" in cmdline
    assert "/etc/nvidia-mps/mps-control.toml" in cmdline
    assert host.file("/run/nvidia-mps/control").is_socket


def test_directories_owner_and_mode(host):
    for path in ("/run/nvidia-mps", "/var/log/nvidia-mps"):
        directory = host.file(path)
        assert directory.is_directory and directory.user == "root" and directory.mode == 0o755


def test_default_percentage_and_pinned_limit(host):
    cmd = host.run("printf 'get_default_active_thread_percentage\\nget_default_device_pinned_mem_limit 0\\n' "
                   "| CUDA_MPS_PIPE_DIRECTORY=/run/nvidia-mps nvidia-cuda-mps-control")
    assert cmd.rc == 0 and cmd.stdout.split() == ["50.0", "40960M"]


def test_namespaces_of_the_shared_server(host):
    """The guide's query; the table's first line is a header, then name, percentage, pinned limit."""
    cmd = host.run("CUDA_MPS_PIPE_DIRECTORY=/run/nvidia-mps nvidia-cuda-mps-control -p 3 "
                   "namespace list --server=shared")
    rows = [line.split() for line in cmd.stdout.splitlines()[1:]]
    assert cmd.rc == 0 and {r[0]: r[1:] for r in rows} == {"default": ["10.00", "unlimited"],
                                                           "pod_a": ["50.00", "unlimited"]}


def test_the_namespace_pipe_directory_is_where_the_daemon_says(host):
    cmd = host.run("CUDA_MPS_PIPE_DIRECTORY=/run/nvidia-mps nvidia-cuda-mps-control -p 3 "
                   "namespace get pod_a shared pipe_directory")
    assert cmd.rc == 0 and cmd.stdout.strip() == "/run/nvidia-mps/shared/pod_a"
    assert host.file("/run/nvidia-mps/shared/pod_a/control").is_socket


def test_started_once(host):
    log = host.file("/var/log/nvidia-mps/control.log").content_string
    assert log.count("Starting control daemon using socket /run/nvidia-mps/control") == 1
