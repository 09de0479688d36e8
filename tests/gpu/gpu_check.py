# Apache-2.0
"""The steps of tests/gpu/run.sh (which checks the prerequisites first).

Every module call goes through `ansible localhost -m smshare.kai.<module>` so the
modules run as users run them. Evidence (figures, module results, raw MPS
answers) goes to one JSON file, also when a step fails.
"""
import argparse
import json
import os
import platform
import select
import shutil
import subprocess
import sys
import tempfile
import time

WORK = os.environ.get("SMSHARE_GPU_WORK", "/tmp/smshare-gpu-check")
PIPE = WORK + "/pipe"
LOG = WORK + "/log"
CONFIG = WORK + "/mps-control.toml"
MPS_PROCESSES = ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server")
CLIENT = r"""
import json, torch
props = torch.cuda.get_device_properties(0)
a = torch.randn(2048, 2048, device="cuda")
ok = bool(torch.isfinite(a @ a).all().item())
print(json.dumps({"name": props.name, "multiprocessor_count": props.multi_processor_count,
                  "total_memory": props.total_memory, "matmul_ok": ok}))
"""
# A client that stays attached (its CUDA context open) until told to go: MPS refuses to change or delete
# its namespace meanwhile (the fork's mpsctl/control.go).
HOLDING_CLIENT = r"""
import sys, time, torch
torch.cuda.get_device_properties(0)
a = torch.randn(16, 16, device="cuda")
bool(torch.isfinite(a @ a).all().item())
print("attached", flush=True)
time.sleep(float(sys.argv[1]))
"""
# The MPS v3 configuration the gpu-fractioning fork's mpsd writes (kai-gpu-fractioning
# fractioning-manager/mpsd/internal/config.go @ 0ee10b42), the server owned by this uid.
V3_CONFIG = ('[features.memacct]\nenabled=true\naudit_log=true\n\n[features.context-share]\nenabled=true\n'
             'default_socket="off"\n\n[servers.shared]\n')


class CheckFailed(Exception):
    pass


def collection_module(name):
    """A module_utils module of the collection under test (ANSIBLE_COLLECTIONS_PATH, as run.sh sets it)."""
    collections = os.environ["ANSIBLE_COLLECTIONS_PATH"]
    if collections not in sys.path:
        sys.path.insert(0, collections)
    return __import__("ansible_collections.smshare.kai.plugins.module_utils." + name, fromlist=[name])


def half_rounded_down(sms, percentage=50):
    return sms * percentage // 100


class Check:
    def __init__(self, repo, evidence_path):
        self.repo = repo
        self.evidence_path = evidence_path
        self.evidence = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                         "host": platform.node(), "kernel": platform.release(),
                         "steps": [], "checks": {}, "recordings": {}}
        self.failures = []

    # -- plumbing
    def module(self, name, args, expect_failure=False, check_mode=False):
        tree = tempfile.mkdtemp(prefix="smshare-gpu-tree.")
        argv = ["ansible", "localhost", "-i", "localhost,", "-c", "local", "-t", tree,
                "-m", "smshare.kai." + name] + (["-a", json.dumps(args)] if args else []) \
            + (["--check"] if check_mode else [])
        started = time.time()
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        try:
            with open(os.path.join(tree, "localhost")) as handle:
                result = json.load(handle)
        except (OSError, ValueError):
            result = {"failed": True, "msg": "no result", "stdout": proc.stdout[-2000:],
                      "stderr": proc.stderr[-2000:]}
        shutil.rmtree(tree, ignore_errors=True)
        self.evidence["steps"].append({"module": name, "args": args, "check_mode": check_mode,
                                       "rc": proc.returncode,
                                       "seconds": round(time.time() - started, 2), "result": result})
        if (result.get("failed") or proc.returncode != 0) and not expect_failure:
            raise CheckFailed("%s failed: %s %s" % (name, result.get("msg"), result.get("stderr", "")[-600:]))
        return result

    def client(self, env_extra, label):
        env = dict(os.environ)
        for key in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"):
            env.pop(key, None)
        env.update(env_extra)
        proc = subprocess.run([sys.executable, "-c", CLIENT], env=env, capture_output=True,
                              text=True, timeout=180, check=False)
        step = {"client": label, "env": env_extra, "rc": proc.returncode,
                "stdout": proc.stdout[-2000:], "stderr": proc.stderr[-2000:]}
        self.evidence["steps"].append(step)
        if proc.returncode != 0:
            raise CheckFailed("CUDA client %s failed (rc=%d): %s" % (label, proc.returncode, proc.stderr[-500:]))
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def check(self, name, passed, **figures):
        self.evidence["checks"][name] = dict(figures, passed=bool(passed))
        if not passed:
            self.failures.append(name)

    def record_verbs(self, protocol, prefix=""):
        """Raw answers of the verbs the modules use, to correct the verb table."""
        collections = os.environ["ANSIBLE_COLLECTIONS_PATH"]
        sys.path.insert(0, collections)
        from ansible_collections.smshare.kai.plugins.module_utils import mps  # noqa
        params = {"pid": 0, "device": 0, "server": "shared", "percentage": 50, "limit": "0",
                  "name": self.evidence.get("v3_namespace") or "x"}
        env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=PIPE, CUDA_MPS_LOG_DIRECTORY=LOG, LC_ALL="C")
        for name, verb in sorted(mps.VERBS.items()):
            if name.startswith(("set_", "namespace_create", "namespace_set", "namespace_delete", "client_terminate")) \
                    or name == "quit":
                continue  # read-only verbs only
            if verb.get("protocol", 2) == 3 and protocol != 3:
                continue
            if name.startswith(("namespace_list", "namespace_get", "client_list")) and not prefix:
                continue  # no named server before the v3 configuration
            args, stdin, verb_env = mps.render(name, **params)
            if name in ("get_client_list", "get_server_status"):
                pids = self.evidence["recordings"].get(prefix + "get_server_list", {}).get("stdout", "").split()
                if not pids:
                    continue
                args, stdin, verb_env = mps.render(name, pid=pids[0])
            proc = subprocess.run(["nvidia-cuda-mps-control"] + args, input=stdin, env=dict(env, **verb_env),
                                  capture_output=True, text=True, timeout=60, check=False)
            parsed, error = None, None
            try:
                parsed = verb["parse"](proc.stdout + (proc.stderr if name == "namespace_help" else ""))
            except ValueError as exc:
                error = str(exc)
            self.evidence["recordings"][prefix + name] = {
                "argv": args, "stdin": stdin, "rc": proc.returncode, "stdout": proc.stdout,
                "stderr": proc.stderr, "verified_in_table": verb["verified"],
                "parsed": parsed, "parse_error": error}
        # the seed's human query, as printed
        if protocol == 3 and prefix:
            proc = subprocess.run(["nvidia-cuda-mps-control", "-p", "3", "namespace", "list",
                                   "--server=shared"], env=env, capture_output=True, text=True, timeout=60,
                                  check=False)
            self.evidence["recordings"][prefix + "seed_namespace_list"] = {
                "rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}

    def leftover_processes(self):
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open("/proc/%s/comm" % entry) as handle:
                    comm = handle.read().strip()
            except OSError:
                continue
            if not comm.startswith(tuple(p[:15] for p in MPS_PROCESSES)):
                continue
            try:  # ours: started for our pipe directory (others may share /proc)
                with open("/proc/%s/environ" % entry, "rb") as handle:
                    ours = ("CUDA_MPS_PIPE_DIRECTORY=" + PIPE).encode() in handle.read()
            except OSError:
                ours = True
            if ours:
                found.append({"pid": int(entry), "comm": comm})
        return found

    # -- the check
    def run(self):
        base = {"pipe_directory": PIPE, "log_directory": LOG, "pipe_directory_mode": "0755",
                "log_directory_mode": "0755"}
        gpu = self.module("gpu_info", {})
        keys = ("driver_version", "driver_branch", "cuda_version", "gpu_count", "gpus", "nvswitch_count")
        self.evidence["gpu"] = {k: gpu.get(k) for k in keys}
        info = self.module("mps_info", {"pipe_directory": PIPE, "log_directory": LOG})
        if info["state"]["running"]:
            raise CheckFailed("an MPS daemon already runs for %s: stop it first" % PIPE)
        v3 = bool(info.get("v3_supported"))
        protocol = 3 if v3 else 2
        self.evidence["mps_v3"] = {"supported": v3, "note": None if v3 else
                                   "this driver's nvidia-cuda-mps-control has no protocol 3 (MPS v3 needs "
                                   "r615+): the v3 namespace check was skipped, the classic check ran"}
        if not v3:
            sys.stderr.write("gpu-check: MPS v3 is not supported by this driver (%s): v3 checks skipped\n"
                             % gpu.get("driver_version"))

        baseline = self.client({}, "without MPS")
        device_sms = baseline["multiprocessor_count"]
        self.evidence["device_multiprocessor_count"] = device_sms
        if gpu["gpus"][0].get("multiprocessor_count") is not None:
            self.check("gpu_info_sm_count_matches_cuda",
                       gpu["gpus"][0]["multiprocessor_count"] == device_sms,
                       gpu_info=gpu["gpus"][0]["multiprocessor_count"], cuda=device_sms)

        wanted = dict(base, protocol=protocol, default_active_thread_percentage=50)
        dry = self.module("mps_control", wanted, check_mode=True)
        self.check("check_mode_started_nothing",
                   dry.get("changed") and not self.module("mps_info", {"pipe_directory": PIPE})["state"]["running"],
                   commands=dry.get("commands"))
        first = self.module("mps_control", wanted)
        second = self.module("mps_control", wanted)
        self.check("converge_then_unchanged", first.get("changed") and not second.get("changed"),
                   first_commands=first.get("commands"), second_commands=second.get("commands"))

        client = self.client({"CUDA_MPS_PIPE_DIRECTORY": PIPE, "CUDA_MPS_LOG_DIRECTORY": LOG,
                              "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100"}, "MPS 50% default, asks 100%")
        expected = half_rounded_down(device_sms)
        self.check("client_gets_half_the_sms_despite_override",
                   client["multiprocessor_count"] == expected and client["matmul_ok"],
                   device_sms=device_sms, client_sms=client["multiprocessor_count"], expected=expected)
        state = self.module("mps_info", {"pipe_directory": PIPE, "log_directory": LOG})
        self.evidence["mps_state_after_client"] = state["state"]
        self.record_verbs(protocol)
        self.greedy_neighbour_check(base, protocol, device_sms, client["multiprocessor_count"],
                                    baseline["total_memory"] // (1 << 20))

        if v3:
            self.v3_namespace_check(base, device_sms)

        stop = self.module("mps_control", dict(base, state="absent"))
        time.sleep(1)
        left = self.leftover_processes()
        after = self.module("mps_info", {"pipe_directory": PIPE, "log_directory": LOG})
        self.check("stopped_nothing_left", stop.get("changed") and not left and not after["state"]["running"],
                   leftover=left)

    def probe(self, role, cap_mib, hold=None):
        """The smoke test's greedy-neighbour probe (plugins/module_utils/gpu_probe.py, run with python3 -c
        as the pods run it) as a client of the daemon; with `hold` a Popen still holding, else its result."""
        source = collection_module("smoke_checks").PROBE_SOURCE
        env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=PIPE, CUDA_MPS_LOG_DIRECTORY=LOG)
        for key in ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"):
            env.pop(key, None)
        extra = os.environ.get("SMSHARE_GPU_PROBE_PATH")   # the dry run's stand-in ctypes (no GPU)
        if extra:
            env["PYTHONPATH"] = extra + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        argv = [sys.executable, "-c", source, "--role", role, "--cap-mib", str(cap_mib)]
        if hold:
            return subprocess.Popen(argv + ["--hold", str(hold)], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180, check=False)
        self.evidence["steps"].append({"probe": role, "rc": proc.returncode, "stdout": proc.stdout[-4000:],
                                       "stderr": proc.stderr[-2000:]})
        return proc.stdout

    def greedy_neighbour_check(self, base, protocol, device_sms, torch_sms, total_mib):
        """The smoke test's greedy neighbour on this host's GPU: a daemon started afresh whose
        defaults are the pods' caps (50 %, and a pinned device memory limit of a half-GPU pod's
        memory, (total - 1024 MiB) / 2); the greedy probe asks 100 % and drops its own pinned
        limit, takes 4/5 of the cap, tries the cap plus an eighth and holds; beside it the
        neighbour takes 4/5 of its own. Judged by smoke_checks.check_greedy, the smoke test's
        own rule; also whether the probe's driver-API SM count is torch's (the runtime's)."""
        st = collection_module("smoke_checks")
        cap = (total_mib - 1024) // 2
        self.module("mps_control", dict(base, state="absent"))
        self.module("mps_control", dict(base, protocol=protocol, default_active_thread_percentage=50,
                                        default_pinned_mem_limits={"0": "%dM" % cap}))
        greedy = self.probe("greedy", cap, hold=120)
        out = ""
        try:
            ready, _w, _x = select.select([greedy.stdout], [], [], 120)
            out = greedy.stdout.readline() if ready else ""
            neighbour = self.probe("neighbour", cap)
        finally:
            greedy.terminate()
            try:
                rest, err = greedy.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                greedy.kill()
                rest, err = greedy.communicate()
        self.evidence["steps"].append({"probe": "greedy", "rc": greedy.returncode, "stdout": (out + rest)[-4000:],
                                       "stderr": err[-2000:]})
        found = {"greedy": st.parse_probe(out), "neighbour": st.parse_probe(neighbour)}
        self.evidence["greedy_neighbour"] = dict(found, cap_mib=cap)
        decisions = [{"pod": role, "devices": ["GPU-0"], "portion": 0.5, "memory_limit_mib": cap}
                     for role in ("greedy", "neighbour")]
        check = st.check_greedy(platform.node(), 0.5, decisions, found["greedy"], found["neighbour"], device_sms,
                                {"greedy": out + rest + err, "neighbour": neighbour})
        self.check("greedy_neighbour_held_to_its_caps", check["passed"], message=check["message"],
                   evidence=check["evidence"])
        probe_sms = (found["greedy"] or {}).get("multiprocessors")
        self.check("greedy_probe_sm_count_matches_torch", probe_sms == torch_sms, probe=probe_sms, torch=torch_sms)

    def v3_namespace_check(self, base, device_sms):
        """Restart with the fork's v3 config; every namespace verb through the modules: a namespace
        created and capped at 25% (create, set), its pipe directory read back (get), a client that asks
        100% gets 25%, listed (client list) while attached, during which a change is refused
        (namespace_busy); a name the daemon refuses is refused before any call; then deleted."""
        with open(CONFIG, "w") as handle:
            handle.write(V3_CONFIG)
        namespace = "smshare_gpu_check"
        self.evidence["v3_namespace"] = namespace
        wanted = dict(base, protocol=3, multiuser=True, config_file=CONFIG, restart=True,
                      namespaces=[{"server": "shared", "name": namespace, "active_thread_percentage": 25}])
        holder = None
        try:
            refused = self.module("mps_control", dict(wanted, restart=False, namespaces=[
                {"server": "shared", "name": "team-A", "active_thread_percentage": 25}]), expect_failure=True)
            self.check("v3_bad_name_refused_before_any_call",
                       refused.get("failure") == "bad_input" and not refused.get("commands"),
                       failure=refused.get("failure"), msg=refused.get("msg"))
            first = self.module("mps_control", wanted)
            second = self.module("mps_control", dict(wanted, restart=False))
            pipe = (second.get("pipe_directories") or {}).get("shared", {}).get(namespace)
            self.check("v3_namespace_created_capped_and_read_back",
                       first.get("changed") and not second.get("changed") and bool(pipe),
                       commands=first.get("commands"), pipe_directory=pipe)
            client = self.client({"CUDA_MPS_PIPE_DIRECTORY": pipe or PIPE,
                                  "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100"}, "v3 namespace 25%, asks 100%")
            expected = half_rounded_down(device_sms, 25)
            self.check("v3_namespace_caps_the_client", client["multiprocessor_count"] == expected,
                       client_sms=client["multiprocessor_count"], expected=expected)
            env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=pipe or PIPE)
            env.pop("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", None)
            holder = subprocess.Popen([sys.executable, "-c", HOLDING_CLIENT, "120"], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
            attached = holder.stdout.readline().strip() == "attached"
            info = self.module("mps_info", {"pipe_directory": PIPE, "log_directory": LOG, "servers": ["shared"]})
            listed = [c for c in info["state"].get("clients") or [] if c.get("pid") == holder.pid]
            busy = self.module("mps_control", dict(wanted, restart=False, namespaces=[
                {"server": "shared", "name": namespace, "active_thread_percentage": 30}]), expect_failure=True)
            self.check("v3_client_listed_and_its_namespace_not_changed_while_attached",
                       attached and bool(listed) and listed[0].get("namespace") == namespace
                       and busy.get("failure") == "namespace_busy" and not busy.get("commands"),
                       clients=info["state"].get("clients"), refusal=busy.get("msg"))
            self.record_verbs(3, prefix="v3:")
            holder.terminate()
            holder.wait(timeout=60)
            gone = self.module("mps_control", dict(wanted, restart=False, namespaces=[
                {"server": "shared", "name": namespace, "state": "absent"}]))
            after = self.module("mps_info", {"pipe_directory": PIPE, "log_directory": LOG, "servers": ["shared"]})
            names = [r["namespace"] for r in after["state"]["namespaces"].get("shared", [])]
            self.check("v3_namespace_deleted", gone.get("changed") and namespace not in names, namespaces=names)
        except CheckFailed as exc:
            self.check("v3_namespaces", False, error=str(exc))
        finally:
            if holder is not None and holder.poll() is None:
                holder.kill()

    def finish(self, error=None):
        if error:
            self.evidence["error"] = error
            self.failures.append("error")
            try:  # never leave a daemon behind
                self.module("mps_control", {"state": "absent", "pipe_directory": PIPE, "log_directory": LOG},
                            expect_failure=True)
            except Exception:  # noqa: BLE001
                pass
        self.evidence["result"] = "passed" if not self.failures else "failed"
        self.evidence["failed_checks"] = self.failures
        with open(self.evidence_path, "w") as handle:
            json.dump(self.evidence, handle, indent=2, default=str)
        for name, check in self.evidence["checks"].items():
            sys.stderr.write("gpu-check: %-45s %s\n" % (name, "ok" if check["passed"] else "FAILED"))
        sys.stderr.write("gpu-check: %s; evidence in %s\n" % (self.evidence["result"], self.evidence_path))
        return 0 if not self.failures else 1


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", required=True)
    parser.add_argument("--evidence", required=True)
    args = parser.parse_args()
    os.makedirs(WORK, exist_ok=True)
    check = Check(args.repo, args.evidence)
    try:
        check.run()
    except (CheckFailed, subprocess.TimeoutExpired, KeyError, ValueError) as exc:
        return check.finish(error="%s: %s" % (type(exc).__name__, exc))
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
