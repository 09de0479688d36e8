# Stand-in (lab only): appends one JSON line per make invocation to the file
# named by STANDIN_MAKE_RECORD, so tests assert the exact variables passed.
# Test switch: with STANDIN_MAKE_GATE=PATH, make then waits (up to 15 min) until
# PATH exists, so a test can stop a play while its build runs.
#   standin-record.py FORK "GOALS" VAR=VALUE...   (command-line variables only)
import json
import os
import subprocess
import sys
import time

path = os.environ.get('STANDIN_MAKE_RECORD')
if path:
    fork, goals = sys.argv[1], sys.argv[2].split()
    variables = dict(arg.split('=', 1) for arg in sys.argv[3:])
    commit = subprocess.run(['git', 'rev-parse', 'HEAD'], capture_output=True, text=True,
                            check=False).stdout.strip()
    env = {k: os.environ[k] for k in ('BUILDX_BUILDER',) if k in os.environ}
    with open(path, 'a', encoding='utf-8') as record:
        record.write(json.dumps({'fork': fork, 'goals': goals, 'vars': variables,
                                 'env': env, 'commit': commit, 'cwd': os.getcwd()},
                                sort_keys=True) + '\n')
gate = os.environ.get('STANDIN_MAKE_GATE')
if gate:
    deadline = time.monotonic() + 900
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.2)
