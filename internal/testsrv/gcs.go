package testsrv

// The GCS-compatible server the tests use: $SLUICE_TEST_GCS when set (a
// host:port or URL that Google's storage client reaches through
// STORAGE_EMULATOR_HOST), else one private fake-gcs-server (filesystem
// backend, loopback, a temp directory) started by the first test of the
// process that needs it and killed when that process exits. Tests never
// skip for want of it: they fail, saying how to install it.

import (
	"context"
	"os"
	"strconv"
	"testing"

	"cloud.google.com/go/storage"
)

// FakeGCSVersion is the fake-gcs-server the tests install and run.
const FakeGCSVersion = "v1.56.1"

const gcsInstallHint = "install it with: go install github.com/fsouza/fake-gcs-server@" + FakeGCSVersion +
	" (or point SLUICE_TEST_GCS at a GCS-compatible endpoint)"

var gcssrv = shared{start: startGCS} // address: STORAGE_EMULATOR_HOST

// GCS returns the STORAGE_EMULATOR_HOST of the test GCS server and a fresh,
// empty bucket on it. The process environment then holds
// STORAGE_EMULATOR_HOST; GCSEnv is the same for a subprocess.
func GCS(t testing.TB) (host, bucket string) {
	t.Helper()
	return must(t, "test GCS server", NewGCSBucket)
}

// NewGCSBucket is GCS for callers without a testing.TB.
func NewGCSBucket() (host, bucket string, err error) {
	return gcssrv.newBucket(func(ctx context.Context, _, bucket string) error {
		c, err := storage.NewClient(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		return c.Bucket(bucket).Create(ctx, "sluice-test", nil)
	})
}

// GCSEnv is the environment a subprocess needs to reach the test GCS
// server (call GCS first).
func GCSEnv() []string { return []string{"STORAGE_EMULATOR_HOST=" + gcssrv.addr} }

func startGCS() (string, error) {
	if h := os.Getenv("SLUICE_TEST_GCS"); h != "" {
		os.Setenv("STORAGE_EMULATOR_HOST", h)
		return h, nil
	}
	addr, err := startHTTPServer(goBin{"fake-gcs-server", "github.com/fsouza/fake-gcs-server", FakeGCSVersion, gcsInstallHint},
		func(port int, addr, root string) []string {
			return []string{"-scheme", "http", "-host", "127.0.0.1", "-port", strconv.Itoa(port),
				"-external-url", "http://" + addr, "-public-host", addr, "-backend", "filesystem",
				"-filesystem-root", root, "-log-level", "error"}
		})
	if err != nil {
		return "", err
	}
	h := "http://" + addr
	os.Setenv("STORAGE_EMULATOR_HOST", h)
	return h, nil
}
