package mistral_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/internal/ptest"
	"github.com/sluice-batch/sluice/provider/mistral"
)

func newClient(t *testing.T, base string, mod ...func(*mistral.Config)) *mistral.Client {
	t.Helper()
	return ptest.Client(t, mistral.New, mistral.Config{Config: ptest.Config(base, ptest.Key)}, mod...)
}

func chunk(t *testing.T, job string, attempt int, ids ...string) sluice.BatchRef {
	return ptest.Chunk(t, provider.Presets["mistral"].Codec(), job, 1, attempt, "mistral-small-latest", ids...)
}

// TestMistralRoundTrip: upload, create, poll, download and decode against
// the emulator, with per-line errors; every custom_id comes back once.
func TestMistralRoundTrip(t *testing.T) {
	_, root := ptest.Emulator(t, emulator.Options{Seed: 5, LineErrorRate: 0.2}, nil)
	c := newClient(t, root+"/mistral")
	ref := chunk(t, "job-m", 1, ptest.IDs(40, "m")...)
	b, got := ptest.Cycle(t, c, ref)
	if b.Status != sluice.BatchCompleted || b.ProviderStatus != "SUCCESS" || len(got) != 40 || b.Total != 40 {
		t.Fatalf("batch %+v, %d results", b, len(got))
	}
	kinds := map[sluice.ResultKind]int{}
	for _, r := range got {
		kinds[r.Kind]++
		if r.Kind == sluice.ResultSucceeded && (r.Usage.InputTokens == 0 || r.Line.Response.StatusCode != 200) {
			t.Errorf("success without usage or status: %+v", r)
		}
	}
	if kinds[sluice.ResultSucceeded] == 0 || kinds[sluice.ResultFailed]+kinds[sluice.ResultRetryable] == 0 {
		t.Fatalf("kinds %v", kinds)
	}
	if b.Completed+b.Failed != 40 || b.Failed != kinds[sluice.ResultFailed]+kinds[sluice.ResultRetryable] {
		t.Fatalf("counts %+v vs kinds %v", b, kinds)
	}
	st := ptest.Stats(t, root).ByFamily["mistral"]
	if st.BatchesCreated != 1 || st.RequestsProcessed != 40 || st.RequestsProcessedMoreThanOnce != 0 {
		t.Fatalf("mistral stats %+v", st)
	}
}

// TestMistralBaseURLWithV1: a base URL ending in /v1 reaches the same
// paths.
func TestMistralBaseURLWithV1(t *testing.T) {
	_, root := ptest.Emulator(t, emulator.Options{}, nil)
	c := newClient(t, root+"/mistral/v1/")
	if b, got := ptest.Cycle(t, c, chunk(t, "job-v1", 1, "a", "b")); b.Status != sluice.BatchCompleted || len(got) != 2 {
		t.Fatalf("batch %+v, %d results", b, len(got))
	}
}

// TestMistralLostAnswersAdopted: the upload's and the create's answers are
// lost after they took effect; the client adopts the file and the job by
// listing, so nothing is uploaded or bought twice.
func TestMistralLostAnswersAdopted(t *testing.T) {
	lose := ptest.LoseAnswers(2, func(r *http.Request) bool {
		return r.Method == http.MethodPost && (r.URL.Path == "/mistral/v1/batch/jobs" || r.URL.Path == "/mistral/v1/files")
	})
	_, root := ptest.Emulator(t, emulator.Options{}, lose)
	c := newClient(t, root+"/mistral")
	b, got := ptest.Cycle(t, c, chunk(t, "job-lost", 1, ptest.IDs(5, "x")...))
	if b.Status != sluice.BatchCompleted || len(got) != 5 {
		t.Fatalf("batch %+v, %d results", b, len(got))
	}
	st := ptest.Stats(t, root)
	if st.FilesUploaded != 1 || st.ByFamily["mistral"].BatchesCreated != 1 || st.ByFamily["mistral"].RequestsProcessed != 5 {
		t.Fatalf("made twice: %d files, mistral %+v", st.FilesUploaded, st.ByFamily["mistral"])
	}
}

// TestMistralFindAfterCrash: a new client finds the job (by its metadata)
// and its input file; another attempt of the same chunk finds nothing.
func TestMistralFindAfterCrash(t *testing.T) {
	_, root := ptest.Emulator(t, emulator.Options{BatchTime: time.Hour}, nil)
	c := newClient(t, root+"/mistral")
	ref := chunk(t, "job-find", 1, "a", "b", "c")
	ctx := context.Background()
	fileID, err := c.Upload(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	other := chunk(t, "job-find", 2, "a", "b", "c")
	if f, b, err := newClient(t, root+"/mistral").Find(ctx, other); err != nil || f != "" || b != "" {
		t.Fatalf("attempt 2 before anything: %q %q %v", f, b, err)
	}
	if f, b, err := newClient(t, root+"/mistral").Find(ctx, ref); err != nil || f != fileID || b != "" {
		t.Fatalf("after upload: %q %q %v, want file %s", f, b, err, fileID)
	}
	b, err := c.Create(ctx, ref, fileID)
	if err != nil {
		t.Fatal(err)
	}
	if b.Status != sluice.BatchValidating || b.ProviderStatus != "QUEUED" {
		t.Fatalf("new job %+v", b)
	}
	f, id, err := newClient(t, root+"/mistral").Find(ctx, ref)
	if err != nil || f != fileID || id != b.ID {
		t.Fatalf("after create: %q %q %v, want %s %s", f, id, err, fileID, b.ID)
	}
	if f, id, err := newClient(t, root+"/mistral").Find(ctx, other); err != nil || f != "" || id != "" {
		t.Fatalf("attempt 2: %q %q %v", f, id, err)
	}
}

// TestMistralCancel: cancel goes CANCELLATION_REQUESTED, then CANCELLED.
func TestMistralCancel(t *testing.T) {
	_, root := ptest.Emulator(t, emulator.Options{BatchTime: 200 * time.Millisecond}, nil)
	c := newClient(t, root+"/mistral")
	ctx := context.Background()
	ref := chunk(t, "job-cancel", 1, ptest.IDs(10, "c")...)
	b := ptest.Submit(t, c, ref)
	var err error
	if b, err = c.Cancel(ctx, b.ID); err != nil || b.Status != sluice.BatchCancelling || b.ProviderStatus != "CANCELLATION_REQUESTED" {
		t.Fatalf("cancel: %+v %v", b, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for b.Status != sluice.BatchCancelled {
		if time.Now().After(deadline) {
			t.Fatalf("still %s", b.ProviderStatus)
		}
		time.Sleep(20 * time.Millisecond)
		if b, err = c.Poll(ctx, ref, b.ID); err != nil {
			t.Fatal(err)
		}
	}
	if b.ProviderStatus != "CANCELLED" {
		t.Fatalf("ended %s", b.ProviderStatus)
	}
	if _, err := c.Poll(ctx, ref, "no-such-job"); !errors.Is(err, sluice.ErrNotFound) {
		t.Fatalf("poll unknown: %v", err)
	}
}

// TestMistralTimeoutExceeded: a job past its timeout ends
// TIMEOUT_EXCEEDED (expired) with part of its requests in the output; the
// others have no result (sluice retries them).
func TestMistralTimeoutExceeded(t *testing.T) {
	_, root := ptest.Emulator(t, emulator.Options{ExpireRate: 1, Seed: 2}, nil)
	c := newClient(t, root+"/mistral")
	b, got := ptest.Cycle(t, c, chunk(t, "job-exp", 1, ptest.IDs(20, "e")...))
	if b.Status != sluice.BatchExpired || b.ProviderStatus != "TIMEOUT_EXCEEDED" || len(got) == 0 || len(got) >= 20 {
		t.Fatalf("batch %+v, %d results", b, len(got))
	}
}

// TestMistralWrongKey: a wrong key is a 401 APIError, not retried.
func TestMistralWrongKey(t *testing.T) {
	_, root := ptest.Emulator(t, emulator.Options{}, nil)
	c := newClient(t, root+"/mistral", func(cfg *mistral.Config) { cfg.APIKey = "wrong-key-0000" })
	_, err := c.Upload(context.Background(), chunk(t, "job-key", 1, "a"))
	var ae *sluice.APIError
	if !errors.As(err, &ae) || ae.Status != 401 || ae.Message == "" {
		t.Fatalf("err %v", err)
	}
}

// TestMistralValidationError: a 422 {"detail":[…]} reads as its loc and
// msg.
func TestMistralValidationError(t *testing.T) {
	_, root := ptest.Emulator(t, emulator.Options{}, nil)
	c := newClient(t, root+"/mistral")
	ref := chunk(t, "job-422", 1, "a")
	ref.URL = "/v1/not-an-endpoint"
	fileID, err := c.Upload(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Create(context.Background(), ref, fileID)
	var ae *sluice.APIError
	if !errors.As(err, &ae) || ae.Status != 422 || ae.Code != "enum" || ae.Message == "" {
		t.Fatalf("err %v", err)
	}
	t.Log(ae)
}

func TestMistralStatusMapping(t *testing.T) {
	for s, want := range map[string]sluice.BatchStatus{
		"QUEUED": sluice.BatchValidating, "RUNNING": sluice.BatchInProgress, "SUCCESS": sluice.BatchCompleted,
		"FAILED": sluice.BatchFailed, "TIMEOUT_EXCEEDED": sluice.BatchExpired,
		"CANCELLATION_REQUESTED": sluice.BatchCancelling, "CANCELLED": sluice.BatchCancelled,
	} {
		if got := mistral.MapStatus(s); got != want {
			t.Errorf("%s: %s, want %s", s, got, want)
		}
	}
}
