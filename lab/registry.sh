#!/usr/bin/env bash
# Apache-2.0
# The lab's image registry: Debian's docker-registry on 127.0.0.1 with TLS
# (a CA made here) and htpasswd auth.
#
#   lab/registry.sh up|down|status <state-dir>
#
# `up` writes into <state-dir>: address (host:port), ca.crt, username,
# password; server material stays under <state-dir>/server/ so <state-dir>
# itself can serve as a --cert-dir for buildah/podman. Idempotent: a running
# registry is left alone; existing CA and credentials are reused.
# Environment: SMSHARE_REGISTRY_PORT (default 5443 + 100 x SMSHARE_LAB_INSTANCE; 0 picks a free port),
# SMSHARE_REGISTRY_USER (default smshare).
set -euo pipefail

usage() { echo "usage: $0 up|down|status <state-dir>" >&2; exit 2; }
[ $# -eq 2 ] || usage
action=$1
state=$2
case "$action" in up|down|status) ;; *) usage ;; esac

pidfile=$state/server/registry.pid

running() {
  [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

answers() {
  # 401 from /v2/ means TLS and auth are both in place.
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$state/ca.crt" \
    "https://$(cat "$state/address")/v2/" 2>/dev/null) || true
  [ "$code" = 401 ]
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

make_pki() {
  local srv=$state/server
  if [ ! -s "$state/ca.crt" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 \
      -keyout "$srv/ca.key" -out "$state/ca.crt" \
      -subj "/CN=smshare lab registry CA" 2>/dev/null
    rm -f "$srv/tls.crt"
  fi
  if [ ! -s "$srv/tls.crt" ]; then
    openssl req -newkey rsa:2048 -nodes -keyout "$srv/tls.key" -out "$srv/tls.csr" \
      -subj "/CN=127.0.0.1" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$srv/ext.cnf"
    openssl x509 -req -in "$srv/tls.csr" -CA "$state/ca.crt" -CAkey "$srv/ca.key" \
      -CAserial "$srv/ca.srl" -CAcreateserial -days 3650 -extfile "$srv/ext.cnf" -out "$srv/tls.crt" 2>/dev/null
  fi
}

make_credentials() {
  [ -s "$state/username" ] || printf '%s\n' "${SMSHARE_REGISTRY_USER:-smshare}" >"$state/username"
  # Registry tokens are often base64 (ECR, robot accounts): the lab's password
  # carries its + / = so every quoting and encoding of it is exercised. A state
  # folder from before (hex only) gets a new one while the registry is down.
  if ! grep -q '[+/=]' "$state/password" 2>/dev/null; then
    printf '%s+%s/%s=\n' "$(openssl rand -hex 6)" "$(openssl rand -hex 6)" "$(openssl rand -hex 6)" >"$state/password"
    rm -f "$state/server/htpasswd"
  fi
  chmod 600 "$state/password"
  if [ ! -s "$state/server/htpasswd" ]; then
    # -i reads the password from stdin: it never appears in a process list.
    htpasswd -iBc "$state/server/htpasswd" "$(cat "$state/username")" <"$state/password" 2>/dev/null
  fi
}

write_config() {
  local port=$1 srv=$state/server
  cat >"$srv/config.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $srv/data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
  secret: $(cat "$srv/http-secret")
  tls:
    certificate: $srv/tls.crt
    key: $srv/tls.key
auth:
  htpasswd:
    realm: smshare-lab-registry
    path: $srv/htpasswd
EOF
}

up() {
  mkdir -p "$state/server/data"
  chmod 700 "$state/server"
  if running && answers; then
    echo "registry already running at $(cat "$state/address")"
    return 0
  fi
  if running; then kill "$(cat "$pidfile")" 2>/dev/null || true; fi
  make_pki
  make_credentials
  [ -s "$state/server/http-secret" ] || openssl rand -hex 16 >"$state/server/http-secret"
  # The instance's port, never the one a former run saved in $state/address: a
  # state folder that now holds another instance would take that lab's port.
  local port=${SMSHARE_REGISTRY_PORT:-$((5443 + 100 * ${SMSHARE_LAB_INSTANCE:-0}))}
  [ "$port" = 0 ] && port=$(free_port)
  printf '127.0.0.1:%s\n' "$port" >"$state/address"
  write_config "$port"
  setsid docker-registry serve "$state/server/config.yml" \
    >>"$state/server/registry.log" 2>&1 </dev/null &
  echo $! >"$pidfile"
  for _ in $(seq 1 50); do
    if answers; then
      echo "registry running at 127.0.0.1:$port"
      return 0
    fi
    running || break
    sleep 0.2
  done
  echo "registry did not come up on 127.0.0.1:$port; last log lines:" >&2
  tail -n 20 "$state/server/registry.log" >&2 || true
  return 1
}

down() {
  if running; then
    kill "$(cat "$pidfile")"
    for _ in $(seq 1 50); do running || break; sleep 0.1; done
    echo "registry stopped"
  else
    echo "registry not running"
  fi
  rm -f "$pidfile"
}

status() {
  if running && answers; then
    echo "running at $(cat "$state/address")"
  else
    echo "not running"
    return 3
  fi
}

"$action"
