package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-batch/sluice/internal/check"
	"github.com/sluice-batch/sluice/internal/testsrv"
)

// backends are the stores every contract test runs on: a local directory
// and a bucket of a real S3-compatible server (internal/testsrv).
func backends(t *testing.T, o S3Options) map[string]func(t *testing.T) Store {
	return map[string]func(t *testing.T) Store{
		"dir": func(t *testing.T) Store {
			d := check.Try(NewDir(t.TempDir())).Must(t, "NewDir")
			return d
		},
		"s3":  func(t *testing.T) Store { return newTestS3(t, "pre/fix", o) },
		"gcs": func(t *testing.T) Store { return newTestGCS(t, "pre/fix") },
	}
}

// newTestGCS is a store on a fresh bucket of the test GCS server
// (fake-gcs-server, named as Emulator the way sluice passes
// STORAGE_EMULATOR_HOST).
func newTestGCS(t *testing.T, prefix string) *GCS {
	t.Helper()
	host, bucket := testsrv.GCS(t)
	g, err := NewGCS(context.Background(), bucket, prefix, GCSOptions{Emulator: host})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	if err := g.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	return g
}

func newTestS3(t *testing.T, prefix string, o S3Options) *S3 {
	t.Helper()
	ep, bucket := testsrv.S3(t)
	o.Endpoint = ep
	s := check.Try(NewS3(context.Background(), bucket, prefix, o)).Must(t, "NewS3")
	check.NoErr(t, "Check", s.Check(context.Background()))
	return s
}

func randomBytes(n int, seed int64) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// readBack fails the test unless key reads back as want, byte for byte.
func readBack(t *testing.T, s Store, key string, want []byte, what string) {
	t.Helper()
	if got := readAll(t, s, key); !bytes.Equal(got, want) {
		t.Fatalf("%s: %s reads back %d bytes, want %d", what, key, len(got), len(want))
	}
}

func readAll(t *testing.T, s Store, key string) []byte {
	t.Helper()
	r, _, err := s.Open(context.Background(), key)
	if err != nil {
		t.Fatalf("open %s: %v", key, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return b
}

// TestStoreContract checks the promises of package objstore's doc on every
// backend.
func TestStoreContract(t *testing.T) {
	t.Parallel()
	// Small parts and ranges, so that puts are multipart and reads many
	// ranges without big test data.
	for name, mk := range backends(t, S3Options{PartSize: 5 << 20, RangeSize: 1 << 20}) {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // a directory or bucket of its own
			ctx := context.Background()
			s := mk(t)
			if _, err := s.Stat(ctx, "a/missing"); !errors.Is(err, ErrNotExist) {
				t.Fatalf("Stat of a missing key: %v, want ErrNotExist", err)
			}
			if _, _, err := s.Open(ctx, "a/missing"); !errors.Is(err, ErrNotExist) {
				t.Fatalf("Open of a missing key: %v, want ErrNotExist", err)
			}
			if err := s.Delete(ctx, "a/missing"); err != nil {
				t.Fatalf("Delete of a missing key: %v", err)
			}

			small := []byte("hello\n")
			check.NoErr(t, "Put", s.Put(ctx, "a/small.txt", bytes.NewReader(small)))
			readBack(t, s, "a/small.txt", small, "a small put")
			empty := []byte{}
			check.NoErr(t, "Put", s.Put(ctx, "a/empty", bytes.NewReader(empty)))
			readBack(t, s, "a/empty", empty, "an empty put")

			// A stream of 11.5 MiB: three parts of 5 MiB (the last short).
			big := randomBytes(11<<20+512<<10, 1)
			check.NoErr(t, "Put", s.Put(ctx, "b/big.bin", onlyReader{bytes.NewReader(big)}))
			readBack(t, s, "b/big.bin", big, "a multipart put")
			info := check.Try(s.Stat(ctx, "b/big.bin")).Must(t, "Stat")
			check.Fatal(t, "Stat", info, info.Size == int64(len(big)), info.ETag != "", !info.ModTime.IsZero(), info.Key == "b/big.bin")

			// PutFile, multipart from a file's sections.
			p := filepath.Join(t.TempDir(), "f.bin")
			fileData := randomBytes(6<<20, 2)
			check.NoErr(t, "WriteFile", os.WriteFile(p, fileData, 0o600))
			check.NoErr(t, "PutFile", s.PutFile(ctx, "b/file.bin", p))
			readBack(t, s, "b/file.bin", fileData, "PutFile")
			if _, ok := s.(*S3); ok {
				// S3's ETag of a multipart object ends in -PARTS.
				for key, parts := range map[string]string{"b/big.bin": "-3", "b/file.bin": "-2"} {
					if in, _ := s.Stat(ctx, key); !strings.HasSuffix(strings.Trim(in.ETag, `"`), parts) {
						t.Fatalf("%s has ETag %s: want a multipart upload of %s parts", key, in.ETag, parts[1:])
					}
				}
			}

			// Ranges, one across a part boundary, one past the end.
			for _, rg := range [][2]int64{{0, 10}, {5<<20 - 3, 7}, {int64(len(big)) - 4, 100}, {int64(len(big)) + 10, 5}} {
				r, err := s.ReadRange(ctx, "b/big.bin", rg[0], rg[1])
				if err != nil {
					t.Fatalf("ReadRange %v: %v", rg, err)
				}
				got, err := io.ReadAll(r)
				r.Close()
				if err != nil {
					t.Fatal(err)
				}
				lo, hi := min(rg[0], int64(len(big))), min(rg[0]+rg[1], int64(len(big)))
				if !bytes.Equal(got, big[lo:hi]) {
					t.Fatalf("ReadRange %v: %d bytes, want big[%d:%d]", rg, len(got), lo, hi)
				}
			}

			// A put that fails halfway leaves nothing, and does not touch
			// what was there.
			for _, key := range []string{"c/new", "a/small.txt"} {
				err := s.Put(ctx, key, io.MultiReader(bytes.NewReader(big[:7<<20]), failingReader{}))
				if err == nil || !strings.Contains(err.Error(), "disk on fire") {
					t.Fatalf("Put of a failing reader: %v", err)
				}
			}
			if _, err := s.Stat(ctx, "c/new"); !errors.Is(err, ErrNotExist) {
				t.Fatalf("after a failed put: %v, want ErrNotExist", err)
			}
			readBack(t, s, "a/small.txt", small, "a failed put over an object")
			// Same for a cancelled put.
			cctx, cancel := context.WithCancel(ctx)
			err := s.Put(cctx, "c/cancelled", io.MultiReader(bytes.NewReader(big[:6<<20]), cancelReader{cancel}, bytes.NewReader(big)))
			if err == nil {
				t.Fatal("a cancelled put succeeded")
			}
			if _, err := s.Stat(ctx, "c/cancelled"); !errors.Is(err, ErrNotExist) {
				t.Fatalf("after a cancelled put: %v, want ErrNotExist", err)
			}

			for _, l := range []struct{ prefix, want string }{
				{"b/", "[b/big.bin b/file.bin]"},
				{"", "[a/empty a/small.txt b/big.bin b/file.bin]"},
				{"a/sm", "[a/small.txt]"},
			} {
				var keys []string
				check.NoErr(t, "List "+l.prefix, s.List(ctx, l.prefix, func(i Info) error { keys = append(keys, i.Key); return nil }))
				check.Fatal(t, "List "+l.prefix, keys, fmt.Sprint(keys) == l.want)
			}

			check.NoErr(t, "Delete", s.Delete(ctx, "a/small.txt"))
			if _, err := s.Stat(ctx, "a/small.txt"); !errors.Is(err, ErrNotExist) {
				t.Fatalf("after Delete: %v", err)
			}

			// Fetch copies an object to a local file.
			dst := filepath.Join(t.TempDir(), "sub", "got.bin")
			check.NoErr(t, "Fetch", Fetch(ctx, s, "b/file.bin", dst))
			if got, _ := os.ReadFile(dst); !bytes.Equal(got, fileData) {
				t.Fatal("Fetch: local copy differs")
			}
			if err := Fetch(ctx, s, "b/nothing", filepath.Join(t.TempDir(), "x")); !errors.Is(err, ErrNotExist) {
				t.Fatalf("Fetch of a missing key: %v", err)
			}
			if _, err := s.Stat(ctx, "../escape"); err == nil || errors.Is(err, ErrNotExist) {
				t.Fatalf("a key with .. was accepted: %v", err)
			}
		})
	}
}

// TestS3FailedMultipartIsAborted: a multipart put that fails leaves no
// incomplete upload behind (its parts are let go) and nothing under the key.
func TestS3FailedMultipartIsAborted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestS3(t, "", S3Options{PartSize: 5 << 20})
	err := s.Put(ctx, "out.jsonl", io.MultiReader(bytes.NewReader(randomBytes(12<<20, 3)), failingReader{}))
	if err == nil {
		t.Fatal("put succeeded")
	}
	ups := check.Try(s.client.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(s.bucket)})).Must(t, "ListMultipartUploads")
	if len(ups.Uploads) != 0 {
		t.Fatalf("%d multipart uploads left after a failed put", len(ups.Uploads))
	}
	if _, err := s.Stat(ctx, "out.jsonl"); !errors.Is(err, ErrNotExist) {
		t.Fatalf("Stat after a failed put: %v", err)
	}
}

// TestS3RangedReadRetries: a sequential read fetches ranges ahead and
// retries a range whose GET fails; it never asks for the whole object.
func TestS3RangedReadRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := &flakyTransport{failEvery: 3}
	s := newTestS3(t, "", S3Options{RangeSize: 1 << 20, HTTPClient: &http.Client{Transport: rec}})
	s.rangeWait = time.Millisecond // the retries are the point, not their waits
	data := randomBytes(9<<20+17, 4)
	rec.off = true
	check.NoErr(t, "Put", s.Put(ctx, "in.bin", bytes.NewReader(data)))
	rec.off = false
	got := readAll(t, s, "in.bin")
	if !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, want %d, or they differ", len(got), len(data))
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.whole > 0 {
		t.Fatalf("%d GETs without a Range header", rec.whole)
	}
	if rec.ranges < 10 || rec.failed == 0 {
		t.Fatalf("%d ranged GETs, %d of them failed: want at least 10 ranges and some failures retried", rec.ranges, rec.failed)
	}
}

type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

type cancelReader struct{ cancel func() }

func (c cancelReader) Read([]byte) (int, error) { c.cancel(); return 0, io.EOF }

// flakyTransport counts the GETs of objects and cuts short the body of
// every failEvery-th ranged one (as a connection reset mid-body would).
type flakyTransport struct {
	failEvery int
	off       bool

	mu                    sync.Mutex
	ranges, whole, failed int
}

func (f *flakyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || f.off || req.Method != http.MethodGet || strings.Contains(req.URL.RawQuery, "list-type") {
		return resp, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.Header.Get("Range") == "" {
		f.whole++
		return resp, nil
	}
	f.ranges++
	if f.ranges%f.failEvery == 0 {
		f.failed++
		resp.Body = &cutBody{rc: resp.Body, left: 1000}
	}
	return resp, nil
}

type cutBody struct {
	rc   io.ReadCloser
	left int
}

func (c *cutBody) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, errors.New("connection reset by peer (test)")
	}
	n, err := c.rc.Read(p[:min(len(p), c.left)])
	c.left -= n
	return n, err
}

func (c *cutBody) Close() error { return c.rc.Close() }

// TestGCSEmulatorOption: the GCS server named in GCSOptions.Emulator is
// the one used when STORAGE_EMULATOR_HOST is not set (the library reads
// no environment of its own): an object put through it is read back
// through a plain client of the test server, and the store names it.
func TestGCSEmulatorOption(t *testing.T) {
	host, bucket := testsrv.GCS(t)
	t.Setenv("STORAGE_EMULATOR_HOST", "")
	ctx := context.Background()
	g, err := NewGCS(ctx, bucket, "pre", GCSOptions{Emulator: host, AccessToken: "ya29.never-sent"})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Put(ctx, "k.jsonl", strings.NewReader("line\n")); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(g.String(), strings.TrimPrefix(host, "http://")) {
		t.Fatalf("store %s does not name the server %s", g, host)
	}
	t.Setenv("STORAGE_EMULATOR_HOST", host)
	plain, err := NewGCS(ctx, bucket, "", GCSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	r, _, err := plain.Open(ctx, "pre/k.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if b, _ := io.ReadAll(r); string(b) != "line\n" {
		t.Fatalf("read back %q", b)
	}
}
