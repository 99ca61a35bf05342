package testsrv

// What starting every private server has in common: finding its binary,
// a temp directory that a later test process removes once its owner is
// gone, a free loopback port, a child killed with the test process
// however that process exits, and waiting until it answers.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

var nameSeq atomic.Int64

// uniqueName is a bucket or database name no other test (of this process
// or another) uses: prefix, then the pid, a sequence number and random
// hex, joined by sep.
func uniqueName(prefix, sep string) string {
	var rnd [4]byte
	rand.Read(rnd[:])
	return prefix + strconv.Itoa(os.Getpid()) + sep + strconv.FormatInt(nameSeq.Add(1), 10) + sep + hex.EncodeToString(rnd[:])
}

// shared is a server every test of the process shares, started on first
// use; addr is what reaches it.
type shared struct {
	once  sync.Once
	start func() (string, error)
	addr  string
	err   error
}

// newBucket makes a fresh, empty bucket (named by uniqueName) on the
// server with create, starting the server first if need be.
func (s *shared) newBucket(create func(ctx context.Context, addr, bucket string) error) (addr, bucket string, err error) {
	s.once.Do(func() { s.addr, s.err = s.start() })
	if s.err != nil {
		return "", "", s.err
	}
	bucket = uniqueName("sluice-t", "-")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := create(ctx, s.addr, bucket); err != nil {
		return "", "", fmt.Errorf("create bucket %s at %s: %v", bucket, s.addr, err)
	}
	return s.addr, bucket, nil
}

// must is what newBucket gives, or t fails with what: its error.
func must(t testing.TB, what string, newBucket func() (string, string, error)) (addr, bucket string) {
	t.Helper()
	addr, bucket, err := newBucket()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return addr, bucket
}

// goBin is a server binary that go install can fetch: name from
// module@version; hint says how to install it by hand.
type goBin struct{ name, module, version, hint string }

// startHTTPServer starts the store server b (found by find) in a temp
// directory of its own (its data in root/ there, its output in NAME.log)
// on a free loopback port, with the arguments args gives for them, and
// waits until it answers HTTP. It returns the server's host:port.
func startHTTPServer(b goBin, args func(port int, addr, root string) []string) (string, error) {
	bin, err := b.find()
	if err != nil {
		return "", err
	}
	dir, err := ownedTempDir("sluice-test" + b.name + "-")
	if err != nil {
		return "", err
	}
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o700); err != nil {
		return "", err
	}
	var addr string
	err = onFreePort(4, func(port int) error {
		addr = fmt.Sprintf("127.0.0.1:%d", port)
		_, exited, err := spawnOrphanProof(nil, bin, dir, args(port, addr, root)...)
		if err != nil {
			return err
		}
		return waitHTTP(b.name, addr, exited)
	})
	if err != nil {
		return "", fmt.Errorf("%s did not start: %v (log in %s)", b.name, err, filepath.Join(dir, b.name+".log"))
	}
	return addr, nil
}

// find finds the binary: on PATH, in GOPATH/bin, or go-installed now.
func (b goBin) find() (string, error) {
	name, module, version, hint := b.name, b.module, b.version, b.hint
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	gopath, err := exec.Command("go", "env", "GOPATH").Output()
	if err != nil {
		return "", fmt.Errorf("%s is not on PATH and go env GOPATH failed (%v): %s", name, err, hint)
	}
	p := filepath.Join(strings.TrimSpace(string(gopath)), "bin", name)
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	out, err := exec.Command("go", "install", module+"@"+version).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s is missing and go install failed: %v\n%s\n%s", name, err, out, hint)
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s is missing after go install: %s", name, hint)
	}
	return p, nil
}

// ownedTempDir makes a temp directory prefix+PID-* in the first of parents
// (default: the temp dir) where it can, first removing those (prefix*, in
// every parent and in /dev/shm, where an earlier run may have put them)
// whose test process has exited: the server died with it, and its
// directory could not go then.
func ownedTempDir(prefix string, parents ...string) (string, error) {
	if len(parents) == 0 {
		parents = []string{os.TempDir()}
	}
	for _, parent := range append(parents, "/dev/shm") {
		dirs, _ := filepath.Glob(filepath.Join(parent, prefix+"*"))
		for _, d := range dirs {
			pidStr, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), prefix), "-")
			pid, err := strconv.Atoi(pidStr)
			if err != nil || pid <= 0 {
				continue
			}
			if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
				os.RemoveAll(d)
			}
		}
	}
	var err error
	for _, parent := range parents {
		var dir string
		if dir, err = os.MkdirTemp(parent, fmt.Sprintf("%s%d-", prefix, os.Getpid())); err == nil {
			return dir, nil
		}
	}
	return "", err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// onFreePort calls start with a free loopback port until it succeeds,
// tries times at most (the port may be taken between freePort and the
// server's bind); the last error if none did.
func onFreePort(tries int, start func(port int) error) error {
	var err error
	for try := 0; try < tries; try++ {
		port, perr := freePort()
		if perr != nil {
			return perr
		}
		if err = start(port); err == nil {
			return nil
		}
	}
	return err
}

// spawnOrphanProof starts bin (as cred when not nil, output to
// dir/BIN.log) from a goroutine locked to its OS thread for good:
// Pdeathsig fires when the thread that started the child ends, so that
// thread lives as long as the test process, and the child is killed when
// the process exits however it exits. The child leads its own process
// group. exited gets its Wait error and is closed when it ends.
func spawnOrphanProof(cred *syscall.Credential, bin, dir string, args ...string) (proc *os.Process, exited chan error, err error) {
	name := filepath.Base(bin)
	logf, err := os.OpenFile(filepath.Join(dir, name+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	started := make(chan error, 1)
	exited = make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread lives as long as the process
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("start %s: %w", name, err)
			return
		}
		proc = cmd.Process
		started <- nil
		exited <- cmd.Wait()
		close(exited)
		select {} // keep the thread (Pdeathsig is per thread)
	}()
	err = <-started
	return proc, exited, err
}

// waitReady calls ready until it succeeds, every interval, for wait at
// most, or until the server exits.
func waitReady(name string, exited chan error, wait, interval time.Duration, ready func() error) error {
	deadline := time.Now().Add(wait)
	err := fmt.Errorf("not listening after %v", wait)
	for time.Now().Before(deadline) {
		select {
		case e := <-exited:
			return fmt.Errorf("%s exited: %v", name, e)
		default:
		}
		if err = ready(); err == nil {
			return nil
		}
		time.Sleep(interval)
	}
	return err
}

// waitHTTP waits until addr answers HTTP (any status).
func waitHTTP(name, addr string, exited chan error) error {
	return waitReady(name, exited, 30*time.Second, 50*time.Millisecond, func() error {
		resp, err := http.Get("http://" + addr + "/")
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
}
