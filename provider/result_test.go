package provider_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
)

func TestUploadNameAndMetadata(t *testing.T) {
	ref := sluice.BatchRef{Job: "my job/2024", Chunk: 17, Attempt: 2}
	if got := provider.UploadName(ref); got != "sluice-my_job_2024-c17-a2.jsonl" {
		t.Fatal(got)
	}
	ref.Digest = "0123456789abcdef0123456789abcdef"
	if got := provider.UploadName(ref); got != "sluice-my_job_2024-c17-a2-d0123456789abcdef0123456789abcdef.jsonl" {
		t.Fatal(got)
	}
	md := provider.Metadata(ref)
	if !provider.MatchesMetadata(md, "file-1", ref) || md["sluice_job"] != "my job/2024" || md["sluice_chunk"] != "17" ||
		md["sluice_attempt"] != "2" || md["sluice_digest"] != ref.Digest {
		t.Fatal(md)
	}
	ref.Attempt = 3
	if provider.MatchesMetadata(md, "file-1", ref) || provider.MatchesMetadata(nil, "file-1", ref) {
		t.Fatal("matched another attempt")
	}
}

// TestAdoptOnlyOnProofOfContent: a batch or file under a chunk's name is
// adopted only when it carries the chunk's digest and, when the tracker
// knows the chunk's uploaded file, was made from it (issue 21, item 1).
func TestAdoptOnlyOnProofOfContent(t *testing.T) {
	const mine, other = "11111111111111111111111111111111", "22222222222222222222222222222222"
	named := sluice.BatchRef{Job: "j", Chunk: 1, Attempt: 1}
	with := func(digest, file string) sluice.BatchRef { r := named; r.Digest, r.FileID = digest, file; return r }
	mdOf := func(digest string) map[string]string { return provider.Metadata(with(digest, "")) }
	for _, tc := range []struct {
		name  string
		md    map[string]string
		input string
		ref   sluice.BatchRef
		want  bool
	}{
		{"same digest, file unknown", mdOf(mine), "file-a", with(mine, ""), true},
		{"same digest, our file", mdOf(mine), "file-b", with(mine, "file-b"), true},
		{"same digest, another file", mdOf(mine), "file-a", with(mine, "file-b"), false},
		{"other digest", mdOf(other), "file-a", with(mine, ""), false},
		{"other digest, our file", mdOf(other), "file-b", with(mine, "file-b"), false},
		{"no digest on the batch", mdOf(""), "file-a", with(mine, ""), false},
		{"old chunk, file unknown", mdOf(""), "file-a", with("", ""), false},
		{"old chunk, another file", mdOf(""), "file-a", with("", "file-b"), false},
		{"old chunk, our file", mdOf(""), "file-b", with("", "file-b"), true},
	} {
		if got := provider.MatchesMetadata(tc.md, tc.input, tc.ref); got != tc.want {
			t.Errorf("batch, %s: adopted %v, want %v", tc.name, got, tc.want)
		}
	}
	if !provider.MatchesFile(provider.UploadName(with(mine, "")), 0, with(mine, "")) {
		t.Error("file of this chunk's digest not adopted")
	}
	if provider.MatchesFile(provider.UploadName(with(other, "")), 0, with(mine, "")) {
		t.Error("file of another digest adopted")
	}
	if provider.MatchesFile(provider.UploadName(named), 0, named) {
		t.Error("a file adopted by name alone for a chunk without a digest")
	}
	if r := with(mine, ""); provider.MatchesFile(provider.UploadName(r), 7, sluice.BatchRef{Job: "j", Chunk: 1, Attempt: 1, Digest: mine, Bytes: 8}) {
		t.Error("a file of another size adopted")
	}
}

func TestKinds(t *testing.T) {
	for status, want := range map[int]sluice.ResultKind{200: sluice.ResultSucceeded, 201: sluice.ResultSucceeded,
		400: sluice.ResultFailed, 401: sluice.ResultFailed, 404: sluice.ResultFailed, 422: sluice.ResultFailed,
		408: sluice.ResultRetryable, 429: sluice.ResultRetryable, 500: sluice.ResultRetryable, 529: sluice.ResultRetryable} {
		if got := provider.StatusKind(status); got != want {
			t.Errorf("%d: %v", status, got)
		}
	}
	for code, want := range map[string]sluice.ResultKind{"batch_expired": sluice.ResultRetryable, "batch_cancelled": sluice.ResultRetryable,
		"cancelled": sluice.ResultRetryable, "rate_limit_exceeded": sluice.ResultRetryable, "server_error": sluice.ResultRetryable,
		"invalid_request": sluice.ResultFailed, "": sluice.ResultFailed} {
		if got := provider.CodeKind(code); got != want {
			t.Errorf("%q: %v", code, got)
		}
	}
}

func TestLineReader(t *testing.T) {
	long := strings.Repeat("x", 3<<20) // longer than the reader's buffer
	lr := provider.NewLineReader(strings.NewReader("a\r\n\n  \n"+long+"\nlast"), "f.jsonl", 4<<20)
	var got []string
	for {
		line, err := lr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(line))
	}
	if len(got) != 3 || got[0] != "a" || got[1] != long || got[2] != "last" || lr.Line() != 5 {
		t.Fatalf("%d lines, line %d", len(got), lr.Line())
	}
	lr = provider.NewLineReader(strings.NewReader("ok\n"+long+"\n"), "f.jsonl", 1<<20)
	lr.Next()
	_, err := lr.Next()
	var me *provider.MalformedError
	if !errors.As(err, &me) || me.Line != 2 || me.File != "f.jsonl" || !errors.Is(err, provider.ErrMalformed) {
		t.Fatalf("err %v", err)
	}
}
