#!/usr/bin/env bash
# The lab's STAND-IN NVIDIA CUDA apt repository: build it, serve it to podman
# containers over http on the podman bridge gateway, stop it.
#
#   lab/standin/apt/repo.sh build        build (cached), print the repository folder
#   lab/standin/apt/repo.sh start        serve it until `stop` (the lab); print the base URL
#   lab/standin/apt/repo.sh stop         end `start`'s hold; the server stops unless a
#                                        live process still holds it
#   lab/standin/apt/repo.sh hold PID     serve it while process PID lives (test sessions);
#                                        print the base URL
#   lab/standin/apt/repo.sh release PID  end PID's hold; the server stops when nothing holds it
#   lab/standin/apt/repo.sh ensure       serve it without a hold (a Molecule prepare run by hand)
#   lab/standin/apt/repo.sh url          print the base URL (http://GATEWAY:PORT)
#   lab/standin/apt/repo.sh status       exit 0 when the server answers
#   lab/standin/apt/repo.sh credentials  print the file with the "user:password" that
#                                        https://GATEWAY:PORT+1/private/ (a mirror that
#                                        needs a login, TLS with the lab's stand-in CA) takes
#   lab/standin/apt/repo.sh private-url  print that mirror's base URL
#   lab/standin/apt/repo.sh break VER    publish driver version VER broken (its kernel module
#                                        package fails to install), rebuild; the server keeps serving
#   lab/standin/apt/repo.sh fix VER      publish VER working again, rebuild
#   lab/standin/apt/repo.sh broken       list the versions published broken
#
# Containers on the default podman network reach <url>/<distro>/x86_64/ (e.g.
# debian12); install <url>/debian12/x86_64/cuda-keyring_1.1-1_all.deb to point
# apt at it. <url>/distro/ stands in for the distribution's archive (kernel
# headers, initramfs-tools, python3-debian: lab/standin/apt/provision-node.sh).
# Env: SMSHARE_APT_PORT (18615 + 100 x SMSHARE_LAB_INSTANCE), SMSHARE_APT_NETWORK
# (podman), SMSHARE_APT_STATE (apt/ in the lab's state folder: $SMSHARE_LAB_STATE, else
# .lab under the repository root).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
state=${SMSHARE_APT_STATE:-${SMSHARE_LAB_STATE:-$root/.lab}/apt}
port=${SMSHARE_APT_PORT:-$((18615 + 100 * ${SMSHARE_LAB_INSTANCE:-0}))}
network=${SMSHARE_APT_NETWORK:-podman}
pidfile=$state/server.pid
here=$root/lab/standin/apt

gateway() {
    local gw
    gw=$(podman network inspect "$network" --format '{{range .Subnets}}{{.Gateway}}{{end}}' 2>/dev/null | head -n1)
    [[ -n "$gw" ]] || { echo "no gateway for podman network $network" >&2; exit 1; }
    echo "$gw"
}

url() { echo "http://$(gateway):$port"; }
private_url() { echo "https://$(gateway):$((port + 1))/private"; }

# The server on our port, if it is this script's serve.py (adopted when a
# pid file was lost, e.g. to two sessions starting it at once).
listener() {
    local pid
    pid=$(ss -ltnpH "( sport = :$port )" 2>/dev/null | grep -o 'pid=[0-9]*' | head -n1 | cut -d= -f2)
    [[ -n "$pid" ]] && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q "$here/serve.py" && echo "$pid"
}

running() {
    local pid
    if [[ -s "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then return 0; fi
    pid=$(listener) || return 1
    echo "$pid" > "$pidfile"
}

# The misbehaviour switch: driver versions published broken, one per line.
broken_file=$state/broken
broken_args() { local v; [[ -s "$broken_file" ]] || return 0; while read -r v; do [[ -n "$v" ]] && printf -- '--broken\n%s\n' "$v"; done < "$broken_file"; }
build() {
    local repo extra=()
    mkdir -p "$state"
    mapfile -t extra < <(broken_args)
    repo=$(python3 "$here/build_repo.py" --out "$state" --url "$(url)" "${extra[@]}")
    tls
    cp "$state/tls/ca.crt" "$repo/distro/standin-ca.crt"
    echo "$repo"
}
version_arg() { [[ "${1:-}" =~ ^[0-9]+(\.[0-9]+)+$ ]] || { echo "usage: repo.sh break|fix VERSION (e.g. 615.71.09)" >&2; exit 2; }; }

# A CA of the stand-in mirror (nodes trust it: provision-node.sh) and a
# certificate for the gateway address, made once.
tls() {
    local dir=$state/tls gw
    gw=$(gateway)
    mkdir -p "$dir"
    if [[ ! -s "$dir/ca.crt" ]]; then
        openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=smshare lab stand-in mirror CA" \
            -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
    fi
    if [[ ! -s "$dir/server.crt" || "$(cat "$dir/server.ip" 2>/dev/null)" != "$gw" ]]; then
        openssl req -newkey rsa:2048 -nodes -subj "/CN=$gw" -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
        openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial -days 3650 \
            -extfile <(printf 'subjectAltName=IP:%s\nextendedKeyUsage=serverAuth\n' "$gw") -out "$dir/server.crt" 2>/dev/null
        echo "$gw" > "$dir/server.ip"
    fi
    chmod 600 "$dir"/*.key
}

# Random credentials for <url>/private/, made once (0600).
credentials() {
    local file=$state/mirror-credentials
    if [[ ! -s "$file" ]]; then
        (umask 077; python3 -c 'import secrets; print("mirror-%s:%s" % (secrets.token_hex(3), secrets.token_urlsafe(18)))' > "$file")
    fi
    echo "$file"
}

# Before the first container the bridge (and its address) does not exist yet:
# then a live server process is all there is to check.
answers() {
    ip -4 -o addr show | grep -q " inet $(gateway)/" || { running; return; }
    python3 -c 'import sys,urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$(url)/debian12/x86_64/Release" 2>/dev/null
}

# Stop the server when neither `start` nor a live process holds it.
stop_if_unheld() {
    local hold
    [[ -e "$state/holds/started" ]] && return 0
    for hold in "$state"/holds/[0-9]*; do
        [[ -e "$hold" ]] || continue
        if kill -0 "$(basename "$hold")" 2>/dev/null; then return 0; fi
        rm -f "$hold"
    done
    if running; then kill "$(cat "$pidfile")"; fi
    rm -f "$pidfile"
}

serve() {
    local repo
    repo=$(build)
    if ! running; then
        setsid python3 "$here/serve.py" --bind "$(gateway)" --port "$port" --root "$repo" \
            --auth-file "$(credentials)" --tls-port $((port + 1)) \
            --cert "$state/tls/server.crt" --key "$state/tls/server.key" \
            >>"$state/server.log" 2>&1 < /dev/null 8>&- &
        echo $! > "$pidfile"
        for _ in $(seq 50); do answers && break; sleep 0.1; done
        answers || { echo "repository server did not answer; see $state/server.log" >&2; exit 1; }
    fi
    url
}

pid_arg() { [[ "${1:-}" =~ ^[0-9]+$ ]] || { echo "usage: repo.sh hold|release PID" >&2; exit 2; }; }

# One caller at a time changes the server (test sessions and the lab share it).
mkdir -p "$state"
exec 8>"$state/server.lock"
flock 8

case "${1:-}" in
    build) build ;;
    url) url ;;
    private-url) private_url ;;
    status) running && answers ;;
    credentials) credentials ;;
    ensure) serve ;;
    start) mkdir -p "$state/holds" && touch "$state/holds/started" && serve ;;
    stop) rm -f "$state/holds/started"; stop_if_unheld ;;
    hold) pid_arg "${2:-}"; mkdir -p "$state/holds" && touch "$state/holds/$2" && serve ;;
    release) pid_arg "${2:-}"; rm -f "$state/holds/$2"; stop_if_unheld ;;
    break) version_arg "${2:-}"; { [[ -f "$broken_file" ]] && grep -vx -- "$2" "$broken_file"; echo "$2"; } > "$broken_file.new" || true
           mv "$broken_file.new" "$broken_file"; build >/dev/null; echo "published $2 broken" ;;
    fix) version_arg "${2:-}"; { [[ -f "$broken_file" ]] && grep -vx -- "$2" "$broken_file"; } > "$broken_file.new" || true
         mv "$broken_file.new" "$broken_file"; build >/dev/null; echo "published $2 working" ;;
    broken) [[ -f "$broken_file" ]] && cat "$broken_file"; true ;;
    *) sed -n '2,29p' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
esac
