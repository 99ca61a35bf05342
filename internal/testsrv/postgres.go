// Package testsrv gives tests the real servers sluice talks to beyond one
// machine, never mocks: PostgreSQL here (postgres.go), S3 beside it.
package testsrv

// The PostgreSQL server the tests use: $SLUICE_TEST_POSTGRES when set (a
// postgres:// URL to a server where that role may CREATE DATABASE), else
// one private server per test process: initdb and postgres from
// /usr/lib/postgresql/*/bin (or PATH) in a temp directory (in /dev/shm when
// there is one), on a free
// 127.0.0.1 port with its unix socket in that directory, as the postgres
// user when the tests run as root, killed when the test process exits
// (Pdeathsig from a thread that lives as long as the process). Tests never
// skip for want of it: they fail, saying how to install it.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

const pgInstallHint = "install PostgreSQL (Debian/Ubuntu: apt-get install postgresql) so that initdb and postgres are " +
	"in /usr/lib/postgresql/*/bin or on PATH, or set SLUICE_TEST_POSTGRES to a postgres:// URL of a server where " +
	"that role may CREATE DATABASE"

var pgsrv struct {
	once  sync.Once
	admin string // a DSN to the server's postgres database
	err   error
}

// Postgres returns the DSN of a fresh, empty database on the test server,
// dropped when the test ends.
func Postgres(t testing.TB) string {
	t.Helper()
	dsn, drop, err := NewPostgresDatabase()
	if err != nil {
		t.Fatalf("test PostgreSQL server: %v", err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Logf("test PostgreSQL server: %v", err)
		}
	})
	return dsn
}

// NewPostgresDatabase creates a fresh, empty database on the test server
// (starting the private server on first use) for callers that are not
// tests (scripts/bench-scale.sh through internal/benche2e); drop removes it.
func NewPostgresDatabase() (dsn string, drop func() error, err error) {
	admin, err := PostgresServer()
	if err != nil {
		return "", nil, err
	}
	name := uniqueName("sluice_t", "_")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := pgAdminExec(ctx, admin, `CREATE DATABASE `+name); err != nil {
		return "", nil, fmt.Errorf("create database: %v", err)
	}
	drop = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := pgAdminExec(ctx, admin, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
			return fmt.Errorf("drop database %s: %v", name, err)
		}
		return nil
	}
	return withDatabase(admin, name), drop, nil
}

// PostgresServer returns a DSN to the test server's postgres database,
// starting the private server on first use.
func PostgresServer() (string, error) {
	pgsrv.once.Do(func() {
		if dsn := os.Getenv("SLUICE_TEST_POSTGRES"); dsn != "" {
			pgsrv.admin = dsn
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := pgAdminExec(ctx, dsn, `SELECT 1`); err != nil {
				pgsrv.err = fmt.Errorf("SLUICE_TEST_POSTGRES: %v", err)
			}
			return
		}
		pgsrv.admin, pgsrv.err = startPostgres()
	})
	return pgsrv.admin, pgsrv.err
}

// withDatabase is dsn naming database name instead.
func withDatabase(dsn, name string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	u.Path = "/" + name
	return u.String()
}

func pgAdminExec(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// pgBinDir finds initdb and postgres: the newest /usr/lib/postgresql/N/bin,
// else PATH.
func pgBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("no PostgreSQL server binaries (initdb, postgres) found; %s", pgInstallHint)
}

// startPostgres starts the private server and returns its admin DSN.
func startPostgres() (string, error) {
	srv, err := newPGServer()
	if err != nil {
		return "", err
	}
	return srv.admin, nil
}

// pgServer is one private server: its directory, data and process.
type pgServer struct {
	bin, dir, data string
	cred           *syscall.Credential
	port           int
	admin          string   // DSN of its postgres database
	extra          []string // more server options
	proc           *os.Process
	exited         chan error
}

// newPGServer makes a data directory (initdb) and starts a server on it
// on a free port.
func newPGServer(extra ...string) (*pgServer, error) {
	bin, err := pgBinDir()
	if err != nil {
		return nil, err
	}
	// The pid of the test process that owns a directory is in its name,
	// so a later process removes those whose owner is gone. The data
	// live in memory (/dev/shm) where the machine has it: every test
	// database is a copy of template1 (some thousand files) made and
	// removed, and on a disk's file system the kernel's part of that cost
	// a make-and-drop ten times the CPU (25 ms in memory, 40 to 300 ms on
	// ext4, growing with the disk's load).
	dir, err := ownedTempDir("sluice-testpg-", roomyShm(), os.TempDir())
	if err != nil {
		return nil, err
	}
	s := &pgServer{bin: bin, dir: dir, data: filepath.Join(dir, "data"), extra: extra}
	if os.Geteuid() == 0 {
		// The server refuses to run as root: run it as postgres.
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, and there is no postgres user to run the server as: %v; %s", err, pgInstallHint)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	password, err := s.initdb()
	if err != nil {
		return nil, err
	}
	err = onFreePort(5, func(port int) error {
		s.port = port
		s.admin = fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/postgres?sslmode=disable", password, port)
		return s.start()
	})
	if err != nil {
		return nil, fmt.Errorf("postgres did not start: %v (log: %s)", err, filepath.Join(dir, "postgres.log"))
	}
	return s, nil
}

// initdb makes the data directory, with a random password for postgres.
func (s *pgServer) initdb() (password string, err error) {
	var rnd [12]byte
	rand.Read(rnd[:])
	password = hex.EncodeToString(rnd[:])
	pwfile := filepath.Join(s.dir, "pw")
	if err := os.WriteFile(pwfile, []byte(password+"\n"), 0o600); err != nil {
		return "", err
	}
	if s.cred != nil {
		os.Chown(pwfile, int(s.cred.Uid), int(s.cred.Gid))
	}
	initdb := exec.Command(filepath.Join(s.bin, "initdb"), "-D", s.data, "-U", "postgres", "--pwfile", pwfile,
		"--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync", "--locale=C")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	initdb.Dir = s.dir
	if out, err := initdb.CombinedOutput(); err != nil {
		return "", fmt.Errorf("initdb: %v: %s", err, out)
	}
	os.Remove(pwfile)
	return password, nil
}

// start runs the server on its port and waits until it answers.
func (s *pgServer) start() error {
	args := append([]string{"-D", s.data, "-p", strconv.Itoa(s.port), "-k", s.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=400", "-c", "shared_buffers=64MB",
		// The log is recycled after 96 MB, not 1 GB: it may be in memory.
		"-c", "min_wal_size=32MB", "-c", "max_wal_size=96MB",
		// Dynamic shared memory in files of the data directory, not
		// segments in /dev/shm: a server killed with its test process
		// never removes those, and they pile up run after run.
		"-c", "dynamic_shared_memory_type=mmap"}, s.extra...)
	proc, exited, err := spawnOrphanProof(s.cred, filepath.Join(s.bin, "postgres"), s.dir, args...)
	if err != nil {
		return err
	}
	s.proc, s.exited = proc, exited
	return waitReady("postgres", exited, 90*time.Second, 100*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return pgAdminExec(ctx, s.admin, `SELECT 1`)
	})
}

// RestartablePostgres is a private server of one test's own, which the
// test may stop as a crash or a failover would (every session cut at
// once) and start again on the same port: the database going away under
// a run (docs/scale-out.md, "The job lock when the database goes away").
type RestartablePostgres struct {
	srv *pgServer
	DSN string // a fresh database on it
}

// NewRestartablePostgres starts a private server for t (stopped and
// removed when t ends) with one fresh database.
func NewRestartablePostgres(t testing.TB) *RestartablePostgres {
	t.Helper()
	// A commit must outlive an immediate shutdown, as sluice's crash
	// safety assumes of its database: the shared server's
	// synchronous_commit=off would lose the last commits' WAL with it.
	srv, err := newPGServer("-c", "synchronous_commit=on")
	if err != nil {
		t.Fatalf("test PostgreSQL server: %v", err)
	}
	t.Cleanup(func() {
		srv.stop(syscall.SIGQUIT)
		os.RemoveAll(srv.dir)
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := pgAdminExec(ctx, srv.admin, `CREATE DATABASE sluice`); err != nil {
		t.Fatalf("create database: %v", err)
	}
	return &RestartablePostgres{srv: srv, DSN: withDatabase(srv.admin, "sluice")}
}

// Stop stops the server in immediate mode (pg_ctl -m immediate: SIGQUIT
// to the postmaster, every session cut as by a crash) and waits until it
// is gone.
func (r *RestartablePostgres) Stop(t testing.TB) {
	t.Helper()
	if err := r.srv.stop(syscall.SIGQUIT); err != nil {
		t.Fatal(err)
	}
}

// Start starts the stopped server again on the same port and waits until
// it answers.
func (r *RestartablePostgres) Start(t testing.TB) {
	t.Helper()
	if err := r.srv.start(); err != nil {
		t.Fatalf("restart postgres: %v (log: %s)", err, filepath.Join(r.srv.dir, "postgres.log"))
	}
}

// Admin is a DSN of the server's postgres database, for what a test does
// beside sluice (pg_terminate_backend, say).
func (r *RestartablePostgres) Admin() string { return r.srv.admin }

// stop signals the postmaster and waits for it to exit.
func (s *pgServer) stop(sig syscall.Signal) error {
	if s.proc == nil {
		return nil
	}
	// The postmaster is a process group leader (Setpgid): its children
	// go with it.
	if err := syscall.Kill(s.proc.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	select {
	case <-s.exited:
	case <-time.After(time.Minute):
		syscall.Kill(-s.proc.Pid, syscall.SIGKILL)
		<-s.exited
	}
	s.proc = nil
	return nil
}

// shmRoom is the free space /dev/shm must have to hold a test server's
// data: its files and a WAL of up to 96 MB (its dynamic shared memory is
// in files of the data directory too). A container's /dev/shm is often
// 64 MB: too small, so the data go to the temp directory there.
const shmRoom = 1 << 30

// roomyShm is /dev/shm when it has shmRoom free, else the temp directory.
func roomyShm() string {
	var st syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &st); err != nil || st.Bavail*uint64(st.Bsize) < shmRoom {
		return os.TempDir()
	}
	return "/dev/shm"
}
