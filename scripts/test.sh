#!/usr/bin/env bash
# The whole test suite on a fresh machine (README.md, "Two commands"):
# installs and starts what the tests need, runs `go test ./...` (extra
# arguments are passed on: scripts/test.sh -run TestX ./tracker/), and stops
# what it started.
#
# - PostgreSQL, for the PostgreSQL tracker's tests: $SLUICE_TEST_POSTGRES
#   when set; else Debian's `postgresql` package when initdb is missing
#   (apt-get, as root or through sudo), then one server on 127.0.0.1 in a
#   temp directory that every test package shares (as the postgres user
#   when run as root), stopped at exit.
# - A real S3-compatible server, for objstore and cmd/sluice's TestS3*:
#   $SLUICE_TEST_S3 when set; else versitygw, pinned, go-installed into
#   GOPATH/bin, with its posix backend on 127.0.0.1, stopped at exit.
# - A real GCS-compatible server, for objstore's gs:// store and the
#   Vertex AI family: $SLUICE_TEST_GCS when set; else fake-gcs-server,
#   pinned, go-installed into GOPATH/bin, with its filesystem backend on
#   127.0.0.1, stopped at exit (the tests reach it through
#   STORAGE_EMULATOR_HOST, as Google's storage client reads it).
# - gcc and make for cgo (SQLite), installed when missing.
# - Headless Chromium, for cmd/sluice's TestReport* (the HTML report opened
#   in a real browser): Debian's `chromium` package when /usr/bin/chromium
#   is missing (apt-get, as root or through sudo).
#
# .ci/run calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:$(go env GOPATH)/bin"
export CGO_ENABLED=1 # mattn/go-sqlite3 needs cgo

VERSITYGW_VERSION=${VERSITYGW_VERSION:-v1.8.0}
FAKE_GCS_VERSION=${FAKE_GCS_VERSION:-v1.56.1} # internal/testsrv.FakeGCSVersion

# asroot runs a command as root: directly when root, else through sudo.
asroot() {
  if [ "$(id -u)" = 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    echo "scripts/test.sh: need root (or sudo) to run: $*" >&2
    exit 1
  fi
}

apt_install() {
  echo "scripts/test.sh: installing $* (apt-get)" >&2
  asroot apt-get update -qq
  DEBIAN_FRONTEND=noninteractive asroot apt-get install -y -qq "$@" >/dev/null
}

if ! command -v gcc >/dev/null 2>&1; then
  apt_install gcc libc6-dev
fi

if [ ! -x /usr/bin/chromium ] && ! command -v chromium >/dev/null 2>&1; then
  apt_install chromium
fi

cleanup=()
on_exit() {
  local i
  for ((i = ${#cleanup[@]} - 1; i >= 0; i--)); do
    eval "${cleanup[$i]}" || true
  done
}
trap on_exit EXIT

wait_port() { # port pid log
  local _
  for _ in $(seq 300); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    kill -0 "$2" 2>/dev/null || { cat "$3" >&2; return 1; }
    sleep 0.1
  done
  cat "$3" >&2
  return 1
}

free_port() {
  python3 - 2>/dev/null <<'EOF' || echo $((20000 + RANDOM % 40000))
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
EOF
}

# start_server NAME DIR CMD...: CMD in the background (@PORT@ in its
# arguments replaced by a free loopback port), its output in DIR/NAME.log,
# until it listens; five tries (the port may be taken meanwhile), else
# exit. Sets srv_pid and srv_port.
start_server() {
  local name=$1 dir=$2 a args
  shift 2
  for _ in 1 2 3 4 5; do
    srv_port=$(free_port)
    args=()
    for a in "$@"; do args+=("${a//@PORT@/$srv_port}"); done
    "${args[@]}" >"$dir/$name.log" 2>&1 &
    srv_pid=$!
    if wait_port "$srv_port" "$srv_pid" "$dir/$name.log"; then
      return 0
    fi
    kill "$srv_pid" 2>/dev/null || true
  done
  echo "scripts/test.sh: $name did not start" >&2
  exit 1
}

# S3: versitygw on loopback.
if [ -z "${SLUICE_TEST_S3:-}" ]; then
  if ! versitygw --version 2>/dev/null | grep -q "${VERSITYGW_VERSION#v}"; then
    go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
  fi
  s3dir=$(mktemp -d)
  mkdir "$s3dir/root"
  export AWS_ACCESS_KEY_ID=sluicetest
  AWS_SECRET_ACCESS_KEY=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  export AWS_SECRET_ACCESS_KEY AWS_REGION=us-east-1
  start_server versitygw "$s3dir" versitygw --quiet --access "$AWS_ACCESS_KEY_ID" --secret "$AWS_SECRET_ACCESS_KEY" \
    --port "127.0.0.1:@PORT@" posix "$s3dir/root"
  s3pid=$srv_pid s3port=$srv_port
  cleanup+=("kill $s3pid 2>/dev/null; wait $s3pid 2>/dev/null; rm -rf '$s3dir'")
  export SLUICE_TEST_S3="http://127.0.0.1:$s3port"
fi

# GCS: fake-gcs-server on loopback.
if [ -z "${SLUICE_TEST_GCS:-}" ]; then
  if ! go version -m "$(command -v fake-gcs-server || echo /nonexistent)" 2>/dev/null | grep -q "$FAKE_GCS_VERSION"; then
    go install "github.com/fsouza/fake-gcs-server@$FAKE_GCS_VERSION"
  fi
  gcsdir=$(mktemp -d)
  mkdir "$gcsdir/root"
  start_server fake-gcs-server "$gcsdir" fake-gcs-server -scheme http -host 127.0.0.1 -port @PORT@ \
    -external-url "http://127.0.0.1:@PORT@" -public-host "127.0.0.1:@PORT@" \
    -backend filesystem -filesystem-root "$gcsdir/root" -log-level error
  gcspid=$srv_pid gcsport=$srv_port
  cleanup+=("kill $gcspid 2>/dev/null; wait $gcspid 2>/dev/null; rm -rf '$gcsdir'")
  export SLUICE_TEST_GCS="http://127.0.0.1:$gcsport"
fi

# PostgreSQL: Debian's server package when initdb is missing, one server
# on loopback for every test package.
if [ -z "${SLUICE_TEST_POSTGRES:-}" ]; then
  pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
  if [ -z "$pgbin" ] && ! command -v initdb >/dev/null 2>&1; then
    apt_install postgresql
    pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  fi
  [ -n "$pgbin" ] || pgbin=$(dirname "$(command -v initdb)")
  # In memory where the machine has /dev/shm: every PostgreSQL test makes
  # and drops a database, and on a disk the kernel's work for its files
  # costs ten times the CPU (internal/testsrv/postgres.go).
  # Only with room to spare for its data and WAL (1 GiB: a container's
  # /dev/shm is often 64 MB).
  pgdir=
  if [ "$(df -Pk /dev/shm 2>/dev/null | awk 'NR==2 {print $4}')" -ge 1048576 ] 2>/dev/null; then
    pgdir=$(mktemp -d -p /dev/shm 2>/dev/null) || pgdir=
  fi
  [ -n "$pgdir" ] || pgdir=$(mktemp -d)
  chmod 755 "$pgdir"
  runas=()
  if [ "$(id -u)" = 0 ]; then
    chown postgres: "$pgdir"
    runas=(runuser -u postgres --)
  fi
  pgpw=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  (umask 077 && echo "$pgpw" >"$pgdir/pw")
  if [ "$(id -u)" = 0 ]; then chown postgres: "$pgdir/pw"; fi
  "${runas[@]}" "$pgbin/initdb" -D "$pgdir/data" -U postgres --pwfile "$pgdir/pw" \
    --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C --no-sync >/dev/null
  rm -f "$pgdir/pw"
  pgup=""
  for _ in 1 2 3 4 5; do
    pgport=$(free_port)
    if "${runas[@]}" "$pgbin/pg_ctl" -D "$pgdir/data" -l "$pgdir/postgres.log" -w -t 120 \
      -o "-p $pgport -k $pgdir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c max_connections=400 -c min_wal_size=32MB -c max_wal_size=96MB -c dynamic_shared_memory_type=mmap" \
      start >/dev/null; then
      pgup=1
      break
    fi
  done
  [ -n "$pgup" ] || { cat "$pgdir/postgres.log" >&2; exit 1; }
  cleanup+=("${runas[*]} '$pgbin/pg_ctl' -D '$pgdir/data' -m immediate stop >/dev/null 2>&1; rm -rf '$pgdir'")
  export SLUICE_TEST_POSTGRES="postgres://postgres:$pgpw@127.0.0.1:$pgport/postgres?sslmode=disable"
fi

# Arguments that name packages (., ./x, ../x) run in the main module only;
# without any, both modules run all their packages with the flags given.
pkgs=0
for a in "$@"; do
  case $a in .|./*|../*) pkgs=1 ;; esac
done
rc=0
if [ $pkgs = 1 ]; then
  # Not exec: the EXIT trap must stop the servers started above.
  go test "$@" || rc=$?
  exit $rc
fi
go test "$@" ./... || rc=$?
(cd sdktest && go test "$@" ./...) || rc=$?
exit $rc
