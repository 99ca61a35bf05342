package objstore_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/testsrv"
	"github.com/sluice-batch/sluice/objstore"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/splitter"
	"github.com/sluice-batch/sluice/tracker"
)

// TestS3SplitCompressedInput plans a gzip and a zstd input read from S3 as
// a stream of many small ranged GETs, and gets the same chunk files, counts
// and input hash as a plan of the same file on disk.
func TestS3SplitCompressedInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ep, bucket := testsrv.S3(t)
	s, err := objstore.NewS3(ctx, bucket, "", objstore.S3Options{Endpoint: ep, RangeSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	var plain bytes.Buffer
	rnd := rand.New(rand.NewSource(7))
	for i := range 6000 {
		junk := make([]byte, 120)
		rnd.Read(junk)
		fmt.Fprintf(&plain, `{"custom_id":"r%05d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"%s"}]}}`+"\n",
			i, hex.EncodeToString(junk))
	}
	for _, c := range []struct {
		name     string
		compress func(io.Writer) io.WriteCloser
	}{
		{"in.jsonl.gz", func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) }},
		{"in.jsonl.zst", func(w io.Writer) io.WriteCloser { z, _ := zstd.NewWriter(w); return z }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var packed bytes.Buffer
			zw := c.compress(&packed)
			zw.Write(plain.Bytes())
			zw.Close()
			if packed.Len() < 10*(64<<10) {
				t.Fatalf("compressed input is %d bytes: want at least 10 ranges", packed.Len())
			}
			dir := t.TempDir()
			local := filepath.Join(dir, c.name)
			if err := os.WriteFile(local, packed.Bytes(), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := s.Put(ctx, "inputs/"+c.name, bytes.NewReader(packed.Bytes())); err != nil {
				t.Fatal(err)
			}
			fromDisk := planOf(t, local, nil)
			fromS3 := planOf(t, "s3://"+bucket+"/inputs/"+c.name, func() (io.ReadCloser, sluice.Fingerprint, error) {
				r, info, err := s.Open(ctx, "inputs/"+c.name)
				return r, sluice.Fingerprint{Size: info.Size, ModTime: info.ModTime}, err
			})
			if fromS3.res.Requests != 6000 || fromS3.res.Requests != fromDisk.res.Requests || len(fromS3.res.Chunks) != len(fromDisk.res.Chunks) {
				t.Fatalf("from S3: %d requests in %d chunks; from disk: %d in %d", fromS3.res.Requests, len(fromS3.res.Chunks),
					fromDisk.res.Requests, len(fromDisk.res.Chunks))
			}
			if fromS3.res.Fingerprint.Hash != fromDisk.res.Fingerprint.Hash || fromS3.res.Fingerprint.Size != int64(packed.Len()) {
				t.Fatalf("fingerprint from S3 %+v, from disk %+v", fromS3.res.Fingerprint, fromDisk.res.Fingerprint)
			}
			for _, ch := range fromDisk.res.Chunks {
				a, _ := os.ReadFile(filepath.Join(fromDisk.dir, ch.Path))
				b, _ := os.ReadFile(filepath.Join(fromS3.dir, ch.Path))
				if len(a) == 0 || !bytes.Equal(a, b) {
					t.Fatalf("chunk %s differs between the plans (%d and %d bytes)", ch.Path, len(a), len(b))
				}
			}
		})
	}
}

type planned struct {
	res *splitter.Result
	dir string
}

func planOf(t *testing.T, input string, open func() (io.ReadCloser, sluice.Fingerprint, error)) planned {
	t.Helper()
	ctx := context.Background()
	state := t.TempDir()
	db, err := tracker.Open(ctx, state)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p := provider.Presets["openai"]
	lim := p.Limits.Override(sluice.Limits{MaxBatchRequests: 1000})
	dir := filepath.Join(state, "jobs", "j")
	plan, err := db.BeginPlan(ctx, &sluice.Job{ID: "j", Provider: "openai", Input: input, Dir: dir, Limits: lim, MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	res, err := splitter.Split(ctx, splitter.Config{Input: input, Open: open, Dir: dir, Codec: p.Codec(), Limits: lim}, plan)
	if err != nil {
		t.Fatalf("split %s: %v", input, err)
	}
	if err := plan.Commit(ctx, res.Fingerprint, res.Requests, res.Rejected); err != nil {
		t.Fatal(err)
	}
	return planned{res: res, dir: dir}
}
