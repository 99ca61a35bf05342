package testsrv

// The S3-compatible server the tests use: $SLUICE_TEST_S3 when set (an
// endpoint URL; credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY),
// else one private versitygw (posix backend, loopback, a temp directory)
// started by the first test of the process that needs it and killed when
// that process exits. Tests never skip for want of it: they fail, saying
// how to install it.

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

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// VersitygwVersion is the versitygw the tests install and run.
const VersitygwVersion = "v1.8.0"

const installHint = "install it with: go install github.com/versity/versitygw/cmd/versitygw@" + VersitygwVersion +
	" (or point SLUICE_TEST_S3 at an S3-compatible endpoint, with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"

var s3srv struct {
	once     sync.Once
	endpoint string
	err      error
}

var bucketSeq atomic.Int64

// S3 returns the endpoint of the test S3 server and a fresh, empty bucket
// on it. The process environment then holds what the AWS SDK needs to
// reach it (AWS_ENDPOINT_URL_S3, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_REGION); S3Env is the same for a subprocess.
func S3(t testing.TB) (endpoint, bucket string) {
	t.Helper()
	endpoint, bucket, err := NewS3Bucket()
	if err != nil {
		t.Fatalf("test S3 server: %v", err)
	}
	return endpoint, bucket
}

// NewS3Bucket is S3 for callers that are not tests
// (scripts/bench-scale.sh through internal/benche2e).
func NewS3Bucket() (endpoint, bucket string, err error) {
	s3srv.once.Do(func() { s3srv.endpoint, s3srv.err = startS3() })
	if s3srv.err != nil {
		return "", "", s3srv.err
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	bucket = fmt.Sprintf("sluice-t%d-%d-%s", os.Getpid(), bucketSeq.Add(1), hex.EncodeToString(rnd[:]))
	client, err := S3Client(context.Background(), s3srv.endpoint)
	if err != nil {
		return "", "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		return "", "", fmt.Errorf("create bucket %s at %s: %v", bucket, s3srv.endpoint, err)
	}
	return s3srv.endpoint, bucket, nil
}

// S3Env is the environment a subprocess needs to reach the test S3
// server (call S3 first).
func S3Env() []string {
	return []string{"AWS_ENDPOINT_URL_S3=" + s3srv.endpoint, "AWS_ACCESS_KEY_ID=" + os.Getenv("AWS_ACCESS_KEY_ID"),
		"AWS_SECRET_ACCESS_KEY=" + os.Getenv("AWS_SECRET_ACCESS_KEY"), "AWS_REGION=" + region()}
}

func region() string {
	if r := os.Getenv("AWS_REGION"); r != "" {
		return r
	}
	return "us-east-1"
}

// S3Client is a plain SDK client of the test server (path-style, the
// environment's credentials), for what a test checks behind sluice's back.
func S3Client(ctx context.Context, endpoint string) (*s3.Client, error) {
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(region()))
	if err != nil {
		return nil, err
	}
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.UsePathStyle = true
		o.DisableLogOutputChecksumValidationSkipped = true
	}), nil
}

func startS3() (string, error) {
	if ep := os.Getenv("SLUICE_TEST_S3"); ep != "" {
		if os.Getenv("AWS_ACCESS_KEY_ID") == "" || os.Getenv("AWS_SECRET_ACCESS_KEY") == "" {
			return "", errors.New("SLUICE_TEST_S3 is set but AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY is not")
		}
		os.Setenv("AWS_ENDPOINT_URL_S3", ep)
		os.Setenv("AWS_REGION", region())
		return ep, nil
	}
	bin, err := versitygw()
	if err != nil {
		return "", err
	}
	sweepDirs("sluice-test-s3-*")
	dir, err := os.MkdirTemp("", "sluice-test-s3-")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return "", err
	}
	if err := os.Mkdir(filepath.Join(dir, "root"), 0o700); err != nil {
		return "", err
	}
	var key [12]byte
	rand.Read(key[:])
	access, secret := "sluicetest"+hex.EncodeToString(key[:4]), hex.EncodeToString(key[4:])+"secret"
	for try := 0; ; try++ {
		port, err := freePort()
		if err != nil {
			return "", err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		done, err := spawnOrphanProof(bin, dir, "--quiet", "--access", access, "--secret", secret, "--port", addr, "posix", filepath.Join(dir, "root"))
		if err != nil {
			return "", err
		}
		if err := waitListening(addr, done); err != nil {
			if try < 3 {
				continue // the port was taken meanwhile
			}
			return "", fmt.Errorf("versitygw did not start: %v (log in %s)", err, filepath.Join(dir, "versitygw.log"))
		}
		os.Setenv("AWS_ACCESS_KEY_ID", access)
		os.Setenv("AWS_SECRET_ACCESS_KEY", secret)
		os.Unsetenv("AWS_SESSION_TOKEN")
		os.Setenv("AWS_REGION", region())
		ep := "http://" + addr
		os.Setenv("AWS_ENDPOINT_URL_S3", ep)
		return ep, nil
	}
}

// sweepDirs removes the directories (matching pattern in the temp
// directory) of servers whose test process has exited (the server died
// with it; its directory cannot go then).
func sweepDirs(pattern string) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), pattern))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "owner.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(d)
		}
	}
}

// versitygw finds the binary: on PATH, in GOPATH/bin, or go-installed now.
func versitygw() (string, error) {
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	gopath, err := exec.Command("go", "env", "GOPATH").Output()
	if err != nil {
		return "", fmt.Errorf("versitygw is not on PATH and go env GOPATH failed (%v): %s", err, installHint)
	}
	p := filepath.Join(strings.TrimSpace(string(gopath)), "bin", "versitygw")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	out, err := exec.Command("go", "install", "github.com/versity/versitygw/cmd/versitygw@"+VersitygwVersion).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("versitygw is missing and go install failed: %v\n%s\n%s", err, out, installHint)
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("versitygw is missing after go install: %s", installHint)
	}
	return p, nil
}

// freePort is a free loopback TCP port, for the PostgreSQL and S3 servers.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// spawnOrphanProof starts bin from a goroutine locked to its OS thread
// for good, with Pdeathsig: the child is killed when this process exits,
// however it exits. done is closed if the child ends.
func spawnOrphanProof(bin, dir string, args ...string) (done chan struct{}, err error) {
	started := make(chan error, 1)
	done = make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread lives as long as the process
		log, err := os.OpenFile(filepath.Join(dir, filepath.Base(bin)+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			started <- err
			return
		}
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = log, log
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("start %s: %v: %s", bin, err, installHint)
			return
		}
		started <- nil
		cmd.Wait()
		close(done)
		select {} // keep the thread (Pdeathsig is per thread)
	}()
	return done, <-started
}

func waitListening(addr string, done chan struct{}) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return errors.New("it exited")
		default:
		}
		resp, err := http.Get("http://" + addr + "/")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("not listening after 30s")
}
