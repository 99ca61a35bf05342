package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-batch/sluice/internal/testsrv"
	"github.com/sluice-batch/sluice/objstore"
)

// TestS3OutputUpload: an output bigger than one part is uploaded by
// multipart upload and appears whole; an upload interrupted midway leaves
// nothing under the output's key and no multipart upload behind.
func TestS3OutputUpload(t *testing.T) {
	t.Parallel()
	ep, bucket := testsrv.S3(t)
	client, err := testsrv.S3Client(context.Background(), ep)
	if err != nil {
		t.Fatal(err)
	}
	b := struct {
		name   string
		client *s3.Client
	}{bucket, client}
	dir := t.TempDir()
	// S3's smallest parts (5 MiB), to keep the test light.
	small, err := objstore.NewS3(context.Background(), bucket, "", objstore.S3Options{Endpoint: ep, PartSize: 5 << 20})
	if err != nil {
		t.Fatal(err)
	}
	objects := Objects(func(ctx context.Context, url string) (objstore.Store, string, error) {
		loc, err := objstore.Parse(url)
		return small, loc.Key, err
	})
	url := func(key string) string { return "s3://" + bucket + "/" + key }
	get := func(key string) ([]byte, bool) {
		r, _, err := small.Open(context.Background(), key)
		if errors.Is(err, objstore.ErrNotExist) {
			return nil, false
		}
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		data, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		return data, true
	}
	big := make([]byte, 2*(5<<20)+123)
	for i := range big {
		big[i] = byte('a' + i%26)
	}
	local := filepath.Join(dir, "out.jsonl")
	if err := os.WriteFile(local, big, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := uploadOutputs(context.Background(), objects, [2]string{local, url("done/out.jsonl")}); err != nil {
		t.Fatal(err)
	}
	got, ok := get("done/out.jsonl")
	if !ok || !bytes.Equal(got, big) {
		t.Fatalf("uploaded output: %d bytes (want %d) or differs", len(got), len(big))
	}
	head, err := b.client.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &b.name, Key: aws.String("done/out.jsonl")})
	if err != nil {
		t.Fatal(err)
	}
	if etag := strings.Trim(aws.ToString(head.ETag), `"`); !strings.HasSuffix(etag, "-3") {
		t.Fatalf("ETag %s: want a multipart upload of 3 parts", etag)
	}
	if _, err := os.Stat(local); err == nil {
		t.Error("the local copy of an uploaded output was kept")
	}

	// Interrupted once its multipart upload has begun.
	if err := os.WriteFile(local, big, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			ups, err := b.client.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: &b.name})
			if err == nil && len(ups.Uploads) > 0 {
				cancel()
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	if err := uploadOutputs(ctx, objects, [2]string{local, url("cut/out.jsonl")}); !errors.Is(err, context.Canceled) {
		t.Fatalf("an interrupted upload: %v, want context.Canceled", err)
	}
	if _, ok := get("cut/out.jsonl"); ok {
		t.Fatal("an interrupted upload left an object under the output's key")
	}
	ups, err := b.client.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: &b.name})
	if err != nil {
		t.Fatal(err)
	}
	if len(ups.Uploads) != 0 {
		t.Fatalf("%d multipart uploads left after an interrupted upload", len(ups.Uploads))
	}

	// A merge killed mid-upload leaves an incomplete upload (nothing can
	// abort it): the next upload of that output aborts it.
	for _, key := range []string{"cut/out.jsonl", "cut/out.jsonl.other"} {
		if _, err := b.client.CreateMultipartUpload(context.Background(), &s3.CreateMultipartUploadInput{Bucket: &b.name, Key: aws.String(key)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(local, big[:1000], 0o600); err != nil {
		t.Fatal(err)
	}
	if err := uploadOutputs(context.Background(), objects, [2]string{local, url("cut/out.jsonl")}); err != nil {
		t.Fatal(err)
	}
	ups, err = b.client.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: &b.name})
	if err != nil {
		t.Fatal(err)
	}
	if len(ups.Uploads) != 1 || aws.ToString(ups.Uploads[0].Key) != "cut/out.jsonl.other" {
		t.Fatalf("after the upload: %d incomplete uploads left, want only the other key's", len(ups.Uploads))
	}
}
