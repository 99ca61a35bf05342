package testsrv

// The GCS-compatible server the tests use: $SLUICE_TEST_GCS when set (a
// host:port or URL that Google's storage client reaches through
// STORAGE_EMULATOR_HOST), else one private fake-gcs-server (filesystem
// backend, loopback, a temp directory) started by the first test of the
// process that needs it and killed when that process exits. Tests never
// skip for want of it: they fail, saying how to install it.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/storage"
)

// FakeGCSVersion is the fake-gcs-server the tests install and run.
const FakeGCSVersion = "v1.56.1"

const gcsInstallHint = "install it with: go install github.com/fsouza/fake-gcs-server@" + FakeGCSVersion +
	" (or point SLUICE_TEST_GCS at a GCS-compatible endpoint)"

var gcssrv struct {
	once sync.Once
	host string // STORAGE_EMULATOR_HOST
	err  error
}

// GCS returns the STORAGE_EMULATOR_HOST of the test GCS server and a fresh,
// empty bucket on it. The process environment then holds
// STORAGE_EMULATOR_HOST; GCSEnv is the same for a subprocess.
func GCS(t testing.TB) (host, bucket string) {
	t.Helper()
	host, bucket, err := NewGCSBucket()
	if err != nil {
		t.Fatalf("test GCS server: %v", err)
	}
	return host, bucket
}

// NewGCSBucket is GCS for callers without a testing.TB.
func NewGCSBucket() (host, bucket string, err error) {
	gcssrv.once.Do(func() { gcssrv.host, gcssrv.err = startGCS() })
	if gcssrv.err != nil {
		return "", "", gcssrv.err
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	bucket = fmt.Sprintf("sluice-t%d-%d-%s", os.Getpid(), bucketSeq.Add(1), hex.EncodeToString(rnd[:]))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := storage.NewClient(ctx)
	if err != nil {
		return "", "", err
	}
	defer c.Close()
	if err := c.Bucket(bucket).Create(ctx, "sluice-test", nil); err != nil {
		return "", "", fmt.Errorf("create bucket %s at %s: %v", bucket, gcssrv.host, err)
	}
	return gcssrv.host, bucket, nil
}

// GCSEnv is the environment a subprocess needs to reach the test GCS
// server (call GCS first).
func GCSEnv() []string { return []string{"STORAGE_EMULATOR_HOST=" + gcssrv.host} }

func startGCS() (string, error) {
	if h := os.Getenv("SLUICE_TEST_GCS"); h != "" {
		os.Setenv("STORAGE_EMULATOR_HOST", h)
		return h, nil
	}
	bin, err := fakeGCS()
	if err != nil {
		return "", err
	}
	sweepDirs("sluice-test-gcs-*")
	dir, err := os.MkdirTemp("", "sluice-test-gcs-")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return "", err
	}
	if err := os.Mkdir(filepath.Join(dir, "root"), 0o700); err != nil {
		return "", err
	}
	for try := 0; ; try++ {
		port, err := freePort()
		if err != nil {
			return "", err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		done, err := spawnOrphanProof(bin, dir, "-scheme", "http", "-host", "127.0.0.1", "-port", strconv.Itoa(port),
			"-external-url", "http://"+addr, "-public-host", addr, "-backend", "filesystem",
			"-filesystem-root", filepath.Join(dir, "root"), "-log-level", "error")
		if err != nil {
			return "", err
		}
		if err := waitListening(addr, done); err != nil {
			if try < 3 {
				continue
			}
			return "", fmt.Errorf("fake-gcs-server did not start: %v (log in %s)", err, dir)
		}
		h := "http://" + addr
		os.Setenv("STORAGE_EMULATOR_HOST", h)
		return h, nil
	}
}

// fakeGCS finds the binary: on PATH, in GOPATH/bin, or go-installed now.
func fakeGCS() (string, error) {
	if p, err := exec.LookPath("fake-gcs-server"); err == nil {
		return p, nil
	}
	gopath, err := exec.Command("go", "env", "GOPATH").Output()
	if err != nil {
		return "", fmt.Errorf("fake-gcs-server is not on PATH and go env GOPATH failed (%v): %s", err, gcsInstallHint)
	}
	p := filepath.Join(strings.TrimSpace(string(gopath)), "bin", "fake-gcs-server")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	out, err := exec.Command("go", "install", "github.com/fsouza/fake-gcs-server@"+FakeGCSVersion).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("fake-gcs-server is missing and go install failed: %v\n%s\n%s", err, out, gcsInstallHint)
	}
	return p, nil
}
