# Apache-2.0
"""run_process on a made-up /proc: the topmost ansible process above a module, and
whether a recorded run has ended."""
import pytest

from ansible_collections.smshare.kai.plugins.module_utils import run_process

BOOT = "1b2c3d4e-0000-4000-8000-00000000abcd"


def fake_proc(tmp_path, processes, boot=BOOT):
    """processes: {pid: (ppid, start, argv)}."""
    root = tmp_path / "proc"
    (root / "sys" / "kernel" / "random").mkdir(parents=True)
    (root / "sys" / "kernel" / "random" / "boot_id").write_text(boot + "\n")
    for pid, (ppid, start, argv) in processes.items():
        (root / str(pid)).mkdir()
        fields = ["S", str(ppid)] + ["0"] * 17 + [str(start), "0"]
        (root / str(pid) / "stat").write_text("%d (%s) %s\n" % (pid, argv[0].rsplit("/", 1)[-1][:15], " ".join(fields)))
        (root / str(pid) / "cmdline").write_bytes("\0".join(argv).encode() + b"\0")
    return str(root)


TREE = {
    1: (0, 1, ["/sbin/init"]),
    50: (1, 90, ["/usr/bin/python3", "-m", "pytest"]),
    100: (50, 100, ["/usr/bin/python3", "/venv/bin/ansible-playbook", "site.yml"]),
    110: (100, 200, ["/usr/bin/python3", "/venv/bin/ansible-playbook", "site.yml"]),   # a worker: forked, same argv
    120: (110, 300, ["/bin/sh", "-c", "/usr/bin/python3 /root/.ansible/tmp/x/AnsiballZ_rollout_lock.py && sleep 0"]),
    130: (120, 301, ["/usr/bin/python3", "/root/.ansible/tmp/x/AnsiballZ_rollout_lock.py"]),
}


def test_the_run_is_the_topmost_ansible_process_above_the_module(tmp_path):
    proc = fake_proc(tmp_path, TREE)
    assert run_process.current(proc, pid=130) == "boot=%s pid=100 start=100" % BOOT


def test_an_ad_hoc_ansible_run_counts_too(tmp_path):
    tree = dict(TREE)
    tree.update({100: (50, 100, ["/usr/bin/python3", "/venv/bin/ansible", "localhost", "-m", "x"]),
                 110: (100, 200, ["/usr/bin/python3", "/venv/bin/ansible", "localhost", "-m", "x"])})
    assert run_process.current(fake_proc(tmp_path, tree), pid=130).endswith(" pid=100 start=100")


def test_no_ansible_above_no_record(tmp_path):
    tree = {1: (0, 1, ["/sbin/init"]), 130: (1, 5, ["/usr/bin/python3", "module.py"])}
    assert run_process.current(fake_proc(tmp_path, tree), pid=130) is None


@pytest.mark.parametrize("record, ended", [
    pytest.param("boot=%s pid=100 start=100" % BOOT, False, id="still-running"),
    pytest.param("boot=%s pid=100 start=99" % BOOT, True, id="pid-taken-by-another-process"),
    pytest.param("boot=%s pid=777 start=100" % BOOT, True, id="gone"),
    pytest.param("boot=%s pid=777 start=100" % BOOT.replace("a", "b"), None, id="another-machine-or-boot"),
    pytest.param("", None, id="no-record"),
    pytest.param("pid=777", None, id="malformed"),
    pytest.param("boot=%s pid=777 start=100\n" % BOOT, None, id="trailing-newline-is-malformed"),
])
def test_ended(tmp_path, record, ended):
    assert run_process.ended(record, fake_proc(tmp_path, TREE)) is ended


def test_describe():
    assert run_process.describe("boot=%s pid=100 start=100" % BOOT) == "pid 100"
    assert run_process.describe("x") == "an unknown process"
