"""The helm shim's command-line parser: helm's spellings accepted, everything else refused."""
import shlex
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "lab"))

from helm_shim.argv import Refusal, UsageError, parse  # noqa: E402

ACCEPTED = [
    # (command line as kubernetes.core builds it, command, positionals, flags)
    ("version", ("version",), [], {}),
    ("plugin list", ("plugin", "list"), [], {}),
    ("repo update", ("repo", "update"), [], {}),
    ("list --output=yaml --filter demo --all", ("list",), [],
     {"output": "yaml", "filter": "demo", "all": True}),
    ("list --output=yaml --deployed --pending --filter demo", ("list",), [],
     {"output": "yaml", "deployed": True, "pending": True, "filter": "demo"}),
    ("ls -o json -a", ("list",), [], {"output": "json", "all": True}),
    ("get values --output=yaml demo -a", ("get", "values"), ["demo"],
     {"output": "yaml", "all": True}),
    ("get manifest demo", ("get", "manifest"), ["demo"], {}),
    ("get notes demo", ("get", "notes"), ["demo"], {}),
    ("get hooks demo", ("get", "hooks"), ["demo"], {}),
    ("get values values", ("get", "values"), ["values"], {}),
    ("--version=0.1.0 --repo=https://charts.example show chart 'mychart'",
     ("show", "chart"), ["mychart"], {"version": "0.1.0", "repo": "https://charts.example"}),
    ("show chart '/c' --insecure-skip-tls-verify --plain-http", ("show", "chart"), ["/c"],
     {"insecure_skip_tls_verify": True, "plain_http": True}),
    ("dependency update '/c'", ("dependency", "update"), ["/c"], {}),
    ("dep build", ("dependency", "build"), [], {}),
    ("upgrade -i --reset-values --take-ownership --reuse-values=False --reset-then-reuse-values "
     "--wait --timeout 5m0s --atomic --force --no-hooks --create-namespace "
     "--insecure-skip-tls-verify --plain-http --values=/a.yml -f=/b.yml --skip-crds "
     "--history-max=5 --set a=1 --set-string 'b=two' --set-json 'c={\"d\":1}' "
     "--set-file 'e=/f' --skip-schema-validation demo '/chart'",
     ("upgrade",), ["demo", "/chart"],
     {"install": True, "reset_values": True, "take_ownership": True, "reuse_values": False,
      "reset_then_reuse_values": True, "wait": "watcher", "timeout": "5m0s", "atomic": True,
      "force": True, "no_hooks": True, "create_namespace": True,
      "insecure_skip_tls_verify": True, "plain_http": True, "values": ["/a.yml", "/b.yml"],
      "skip_crds": True, "history_max": "5", "set": ["a=1"], "set_string": ["b=two"],
      "set_json": ['c={"d":1}'], "set_file": ["e=/f"], "skip_schema_validation": True}),
    ("--version=1.2.3 install --dependency-update --replace demo 'c'", ("install",),
     ["demo", "c"], {"version": "1.2.3", "dependency_update": True, "replace": True}),
    ("install demo c --dry-run=server -n other", ("install",), ["demo", "c"],
     {"dry_run": "server", "namespace": "other"}),
    ("install demo c --dry-run --wait=legacy", ("install",), ["demo", "c"],
     {"dry_run": "client", "wait": "legacy"}),
    ("install demo c -f a.yml,b.yml -fc.yml", ("install",), ["demo", "c"],
     {"values": ["a.yml", "b.yml", "c.yml"]}),
    ("uninstall  --keep-history --no-hooks --wait --timeout 1m demo", ("uninstall",), ["demo"],
     {"keep_history": True, "no_hooks": True, "wait": "watcher", "timeout": "1m"}),
    ("status demo", ("status",), ["demo"], {}),
    ("upgrade -ia demo c", None, None, None),  # -a is not an upgrade flag
]


@pytest.mark.parametrize("line,command,args,flags", ACCEPTED,
                         ids=[case[0][:50] for case in ACCEPTED])
def test_helm_command_lines(line, command, args, flags):
    if command is None:
        with pytest.raises(Refusal, match='unsupported flag "-a"'):
            parse(shlex.split(line))
        return
    parsed = parse(shlex.split(line))
    assert parsed.command == command
    assert parsed.args == args
    assert parsed.flags == flags


REFUSED = [
    ("template demo c", 'unsupported subcommand "template"'),
    ("rollback demo 1", 'unsupported subcommand "rollback"'),
    ("get all demo", 'unsupported subcommand "helm get all"'),
    ("get", 'unsupported subcommand "helm get"'),
    ("repo add x https://x", 'unsupported subcommand "helm repo add"'),
    ("", "no subcommand given"),
    ("list --max 5", 'unsupported flag "--max" for "helm list'),
    ("upgrade -i --post-renderer=/bin/cat demo c", "no post-renderer hook"),
    ("install --generate-name c", 'unsupported flag "--generate-name"'),
    ("version --short", 'unsupported flag "--short"'),
    ("get values demo --revision 2", 'unsupported flag "--revision"'),
]


@pytest.mark.parametrize("line,message", REFUSED, ids=[case[0] or "empty" for case in REFUSED])
def test_unsupported_is_refused_naming_it(line, message):
    with pytest.raises(Refusal, match=message.replace("(", r"\(")):
        parse(shlex.split(line))


@pytest.mark.parametrize("line,message", [
    ("upgrade --reuse-values=maybe demo c", 'invalid argument "maybe" for "--reuse-values"'),
    ("get values", '"helm get values RELEASE" takes 1 argument'),
    ("install onlyname", '"helm install RELEASE CHART" takes 2 argument'),
    ("list --filter", "flag needs an argument: --filter"),
    ("status a b", "takes 1 argument"),
])
def test_malformed_lines_fail_like_helm(line, message):
    with pytest.raises(UsageError, match=message):
        parse(shlex.split(line))
