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
	md := provider.Metadata(ref)
	if !provider.MatchesMetadata(md, ref) || md["sluice_job"] != "my job/2024" || md["sluice_chunk"] != "17" || md["sluice_attempt"] != "2" {
		t.Fatal(md)
	}
	ref.Attempt = 3
	if provider.MatchesMetadata(md, ref) || provider.MatchesMetadata(nil, ref) {
		t.Fatal("matched another attempt")
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
