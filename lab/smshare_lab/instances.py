"""Which lab instance (0-9) a state folder drives, allocated machine-wide so two
labs on one machine can never take the same one.

Every instance in use has a claim in REGISTRY (/var/lib/smshare-lab-instances,
outside every clone): `<N>.json` naming the state folder that holds it. A lab
asks for a number (SMSHARE_LAB_INSTANCE=N, from `.lab-instance` or the
environment) or for any free one
(SMSHARE_LAB_INSTANCE=auto, scripts/env.sh's default). A claim
whose state folder no longer holds a lab (no lab.json) and whose holder process
is gone is stale and taken over; one held by another live lab is refused,
naming it. The holder is the process that will bring the lab up: the test
command names itself in SMSHARE_LAB_HOLDER (it claims its labs' numbers first
and brings them up later); otherwise the claiming process. A holder is known by
its pid and start time, so neither a read-only `labctl` call, nor a crashed run,
nor a copy of this machine (whose pids mean nothing) keeps a number held. `labctl down` gives the
number back. Stdlib only: paths.py resolves the instance before anything else
is imported.
"""
import contextlib
import fcntl
import json
import os
from pathlib import Path

REGISTRY = Path(os.environ.get("SMSHARE_LAB_INSTANCES", "/var/lib/smshare-lab-instances"))
COUNT = 10


class Taken(Exception):
    pass


@contextlib.contextmanager
def _locked():
    REGISTRY.mkdir(parents=True, exist_ok=True)
    with open(REGISTRY / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _claim_of(number):
    try:
        return json.loads((REGISTRY / f"{number}.json").read_text())
    except (OSError, ValueError):
        return None


def _started(pid):
    """A process's start time (clock ticks since boot, /proc/PID/stat field 22), or None if no
    such process runs."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def _holder():
    raw = os.environ.get("SMSHARE_LAB_HOLDER", "").strip()
    pid = int(raw) if raw.isdigit() and _started(int(raw)) is not None else os.getpid()
    return pid, _started(pid)


def _holder_runs(claim):
    """Whether the process that made the claim still runs (the same pid and start time)."""
    pid, started = claim.get("pid"), claim.get("started")
    return isinstance(pid, int) and started is not None and _started(pid) == started


def _live(claim):
    """Whether a claim still holds: its state folder has a lab (up, or up once and not taken
    down), or the process that claimed it for a lab about to come up still runs."""
    if not claim:
        return False
    state = Path(claim.get("state", "/nonexistent"))
    if (state / "lab.json").is_file():
        return True
    return state.is_dir() and _holder_runs(claim)


def _write(number, state):
    """Claim `number` for `state`. A claim this state already holds keeps its holder while that
    one runs (labctl up's own children re-resolve the instance: the claim must not pass to them)."""
    path = REGISTRY / f"{number}.json"
    tmp = path.with_suffix(".tmp")
    claim = _claim_of(number) or {}
    if claim.get("state") == str(state) and _holder_runs(claim):
        (state / "instance").write_text(f"{number}\n")
        return
    pid, started = _holder()
    tmp.write_text(json.dumps({"state": str(state), "pid": pid, "started": started}))
    os.replace(tmp, path)
    (state / "instance").write_text(f"{number}\n")


def resolve(state, requested):
    """The instance for `state` (a Path): `requested` is a number or "auto"."""
    state = Path(state).resolve()
    with _locked():
        state.mkdir(parents=True, exist_ok=True)
        if requested == "auto":
            try:
                mine = int((state / "instance").read_text().strip())
            except (OSError, ValueError):
                mine = None
            if mine is not None and (_claim_of(mine) or {}).get("state") in (None, str(state)):
                _write(mine, state)
                return mine
            for number in range(COUNT):
                claim = _claim_of(number)
                if claim is None or claim.get("state") == str(state) or not _live(claim):
                    _write(number, state)
                    return number
            raise Taken("every lab instance (0-9) is held by a live lab: take one down (lab/labctl down)")
        number = int(requested)
        claim = _claim_of(number)
        if claim and claim.get("state") != str(state) and _live(claim):
            raise Taken(f"lab instance {number} is held by the lab in {claim['state']}: put another number "
                        f"(0-9) in this clone's .lab-instance, or set SMSHARE_LAB_INSTANCE=auto, or take that lab "
                        f"down first")
        _write(number, state)
        return number


def release(state, number):
    """Give the number back (the lab of `state` is down)."""
    state = Path(state).resolve()
    with _locked():
        if (_claim_of(number) or {}).get("state") == str(state):
            (REGISTRY / f"{number}.json").unlink(missing_ok=True)
