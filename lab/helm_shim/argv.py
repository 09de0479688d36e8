"""Helm's command line, parsed the way cobra/pflag parse it, for the supported subset.

Flags may come before or after the subcommand (kubernetes.core puts
`--version=V --repo=URL` before `show chart`), long flags take `--f=v` or
`--f v`, short ones `-f v`, `-fv` or `-f=v`, booleans accept Go's ParseBool
spellings. Anything outside the table is a Refusal: exit status 2 and a
message naming the subcommand or flag.
"""
from dataclasses import dataclass, field

BOOL = "bool"          # --flag, --flag=true|false
STRING = "string"      # --flag value, --flag=value
STRINGS = "strings"    # repeatable (list)
CSV = "csv"            # repeatable, each value also split on commas (pflag StringSlice)
OPTIONAL = "optional"  # --flag (takes `bare`) or --flag=value, never a separate word


class Refusal(Exception):
    """The command line asks for something this shim does not implement."""


class UsageError(Exception):
    """The command line is malformed the way real helm would reject it too."""


@dataclass(frozen=True)
class Flag:
    name: str
    kind: str
    short: str = ""
    bare: str = ""

    @property
    def dest(self):
        return self.name.replace("-", "_")


@dataclass
class Parsed:
    command: tuple
    args: list = field(default_factory=list)
    flags: dict = field(default_factory=dict)

    def get(self, name, default=None):
        return self.flags.get(name.replace("-", "_"), default)


GLOBAL = (
    Flag("namespace", STRING, "n"),
    Flag("kubeconfig", STRING),
    Flag("kube-context", STRING),
    Flag("debug", BOOL),
)
CHART_SOURCE = (
    Flag("version", STRING),
    Flag("repo", STRING),
    Flag("insecure-skip-tls-verify", BOOL),
    Flag("plain-http", BOOL),
)
VALUES = (
    Flag("values", CSV, "f"),
    Flag("set", STRINGS),
    Flag("set-string", STRINGS),
    Flag("set-json", STRINGS),
    Flag("set-file", STRINGS),
)
DEPLOY = CHART_SOURCE + VALUES + (
    Flag("wait", OPTIONAL, bare="watcher"),
    Flag("timeout", STRING),
    Flag("atomic", BOOL),
    Flag("rollback-on-failure", BOOL),
    Flag("no-hooks", BOOL),
    Flag("create-namespace", BOOL),
    Flag("skip-crds", BOOL),
    Flag("skip-schema-validation", BOOL),
    Flag("take-ownership", BOOL),
    Flag("dry-run", OPTIONAL, bare="client"),
    Flag("description", STRING),
)
OUTPUT = Flag("output", STRING, "o")

# subcommand words -> (local flags, (min positionals, max positionals), usage)
COMMANDS = {
    ("version",): ((), (0, 0), "helm version"),
    ("plugin", "list"): ((), (0, 0), "helm plugin list"),
    ("repo", "update"): ((), (0, 0), "helm repo update"),
    ("list",): ((OUTPUT, Flag("filter", STRING, "f"), Flag("all", BOOL, "a"),
                 Flag("deployed", BOOL), Flag("failed", BOOL), Flag("pending", BOOL),
                 Flag("superseded", BOOL), Flag("uninstalled", BOOL),
                 Flag("uninstalling", BOOL)), (0, 0), "helm list [flags]"),
    ("get", "values"): ((OUTPUT, Flag("all", BOOL, "a")), (1, 1), "helm get values RELEASE"),
    ("get", "manifest"): ((), (1, 1), "helm get manifest RELEASE"),
    ("get", "notes"): ((), (1, 1), "helm get notes RELEASE"),
    ("get", "hooks"): ((), (1, 1), "helm get hooks RELEASE"),
    ("status",): ((), (1, 1), "helm status RELEASE"),
    ("show", "chart"): (CHART_SOURCE, (1, 1), "helm show chart CHART"),
    ("dependency", "update"): ((), (0, 1), "helm dependency update [CHART]"),
    ("dependency", "build"): ((), (0, 1), "helm dependency build [CHART]"),
    ("install",): (DEPLOY + (Flag("replace", BOOL), Flag("dependency-update", BOOL)),
                   (2, 2), "helm install RELEASE CHART"),
    ("upgrade",): (DEPLOY + (Flag("install", BOOL, "i"), Flag("reset-values", BOOL),
                             Flag("reuse-values", BOOL), Flag("reset-then-reuse-values", BOOL),
                             Flag("force", BOOL), Flag("force-replace", BOOL),
                             Flag("cleanup-on-fail", BOOL), Flag("history-max", STRING)),
                   (2, 2), "helm upgrade RELEASE CHART"),
    ("registry", "login"): ((Flag("username", STRING, "u"), Flag("password", STRING, "p"),
                             Flag("password-stdin", BOOL), Flag("insecure", BOOL), Flag("plain-http", BOOL)),
                            (1, 1), "helm registry login HOST"),
    ("registry", "logout"): ((), (1, 1), "helm registry logout HOST"),
    ("diff", "upgrade"): (CHART_SOURCE + VALUES + (
        Flag("reset-values", BOOL), Flag("reuse-values", BOOL),
        Flag("reset-then-reuse-values", BOOL), Flag("skip-schema-validation", BOOL)),
        (2, 2), "helm diff upgrade RELEASE CHART"),
    ("uninstall",): ((Flag("keep-history", BOOL), Flag("no-hooks", BOOL),
                      Flag("wait", OPTIONAL, bare="watcher"), Flag("timeout", STRING),
                      Flag("ignore-not-found", BOOL)), (1, 1), "helm uninstall RELEASE"),
}
ALIASES = {"ls": "list", "dep": "dependency", "dependencies": "dependency",
           "un": "uninstall", "delete": "uninstall", "del": "uninstall"}

# Real helm flags this shim knows it cannot honour, with the reason.
KNOWN_UNSUPPORTED = {
    "ca-file": "helm-python-sdk's registry client takes the CA from SSL_CERT_FILE",
    "cert-file": "helm-python-sdk's registry client has no client certificates",
    "key-file": "helm-python-sdk's registry client has no client certificates",
    "post-renderer": "the Helm SDK library has no post-renderer hook",
    "post-renderer-args": "the Helm SDK library has no post-renderer hook",
    "generate-name": "pass an explicit release name",
}

_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")


def parse_bool(text, flag):
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise UsageError(f'invalid argument "{text}" for "--{flag}" flag: '
                     f'strconv.ParseBool: parsing "{text}": invalid syntax')


def _supported_list():
    return ", ".join(" ".join(words) for words in COMMANDS)


def _find_command(argv):
    """Subcommand words among argv, skipping flags and their separate values."""
    every = {f.name: f for spec in COMMANDS.values() for f in spec[0]}
    every.update({f.name: f for f in GLOBAL})
    shorts = {f.short: f for f in every.values() if f.short}
    words = []
    skip = False
    for token in argv:
        if skip:
            skip = False
            continue
        if token == "--":
            break
        if token.startswith("--"):
            name = token[2:].split("=", 1)[0]
            flag = every.get(name)
            skip = "=" not in token and flag is not None and flag.kind in (STRING, STRINGS, CSV)
            continue
        if token.startswith("-") and len(token) > 1:
            flag = shorts.get(token[1])
            skip = len(token) == 2 and flag is not None and flag.kind in (STRING, STRINGS, CSV)
            continue
        words.append(token)
    if not words:
        raise Refusal("no subcommand given; the lab's helm shim supports: " + _supported_list())
    first = ALIASES.get(words[0], words[0])
    for command in COMMANDS:
        if command[0] != first:
            continue
        if len(command) == 1:
            return command, [words[0]]
        if len(words) > 1 and words[1] == command[1]:
            return command, words[:2]
    known = [" ".join(c) for c in COMMANDS if c[0] == first]
    asked = " ".join(words[:2])
    if known:
        raise Refusal(f'unsupported subcommand "helm {asked}"; the lab\'s helm shim supports '
                      + ", ".join("helm " + k for k in known))
    raise Refusal(f'unsupported subcommand "{words[0]}"; the lab\'s helm shim supports: '
                  + _supported_list())


def _store(parsed, flag, value):
    if flag.kind == BOOL:
        value = parse_bool(value, flag.name) if isinstance(value, str) else value
        parsed.flags[flag.dest] = value
    elif flag.kind == STRINGS:
        parsed.flags.setdefault(flag.dest, []).append(value)
    elif flag.kind == CSV:
        parsed.flags.setdefault(flag.dest, []).extend(v for v in value.split(",") if v)
    else:
        parsed.flags[flag.dest] = value


def _refuse_flag(token, command):
    name = token.lstrip("-").split("=", 1)[0]
    why = KNOWN_UNSUPPORTED.get(name)
    usage = COMMANDS[command][2]
    allowed = sorted("--" + f.name for f in COMMANDS[command][0] + GLOBAL)
    reason = f" ({why})" if why else ""
    raise Refusal(f'unsupported flag "{token.split("=", 1)[0]}" for "{usage}"{reason}; '
                  f"the lab's helm shim supports: {' '.join(allowed) or 'no flags'}")


def parse(argv):
    """Parse argv (without the program name) into a Parsed, or raise."""
    command, words = _find_command(argv)
    flags = COMMANDS[command][0] + GLOBAL
    longs = {f.name: f for f in flags}
    shorts = {f.short: f for f in flags if f.short}
    parsed = Parsed(command=command)
    positionals = []
    tokens = list(argv)
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if token == "--":
            positionals.extend(tokens[index:])
            break
        if token.startswith("--"):
            name, has_value, value = token[2:].partition("=")
            flag = longs.get(name)
            if flag is None:
                _refuse_flag(token, command)
            if flag.kind == BOOL:
                _store(parsed, flag, value if has_value else True)
            elif flag.kind == OPTIONAL:
                _store(parsed, flag, value if has_value else flag.bare)
            elif has_value:
                _store(parsed, flag, value)
            elif index < len(tokens):
                _store(parsed, flag, tokens[index])
                index += 1
            else:
                raise UsageError(f"flag needs an argument: --{name}")
            continue
        if token.startswith("-") and len(token) > 1:
            index = _parse_shorts(token, tokens, index, shorts, parsed, command)
            continue
        positionals.append(token)
    for word in words:
        positionals.remove(word)
    low, high = COMMANDS[command][1]
    if not low <= len(positionals) <= high:
        usage = COMMANDS[command][2]
        raise UsageError(f'"{usage}" takes {low if low == high else f"{low} to {high}"} '
                         f"argument(s), got {len(positionals)}: {positionals}")
    parsed.args = positionals
    return parsed


def _parse_shorts(token, tokens, index, shorts, parsed, command):
    letters = token[1:]
    while letters:
        flag = shorts.get(letters[0])
        if flag is None:
            _refuse_flag("-" + letters[0], command)
        rest = letters[1:]
        if flag.kind == BOOL:
            if rest.startswith("="):
                _store(parsed, flag, rest[1:])
                return index
            _store(parsed, flag, True)
            letters = rest
            continue
        if flag.kind == OPTIONAL:
            _store(parsed, flag, rest[1:] if rest.startswith("=") else flag.bare)
            return index
        if rest:
            _store(parsed, flag, rest[1:] if rest.startswith("=") else rest)
        elif index < len(tokens):
            _store(parsed, flag, tokens[index])
            index += 1
        else:
            raise UsageError(f"flag needs an argument: '{flag.short}' in -{flag.short}")
        return index
    return index
