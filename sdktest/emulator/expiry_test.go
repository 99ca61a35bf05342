package emulator_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	. "github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/internal/emutest"

	"github.com/openai/openai-go/v3"
)

// TestOutputExpiresAfterHonoured: a create with output_expires_after (the
// official SDK's field) stamps the output file's expires_at that long
// after the file's creation, scaled by ResultRetentionScale; past it the
// file's metadata and content answer 404, and downloads and creates are
// counted in the stats. Out-of-range values are refused 400.
func TestOutputExpiresAfterHonoured(t *testing.T) {
	clk := emutest.NewClock()
	s, ts := start(t, Options{Now: clk.Now, ResultRetentionScale: 0.5})
	c := oaClient(ts)
	f := upload(t, c, "in.jsonl", emutest.ChatLines(3, "gpt-4o-mini"))
	for _, secs := range []int64{3599, 2592001} {
		_, err := c.Batches.New(context.Background(), openai.BatchNewParams{InputFileID: f.ID,
			Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h,
			OutputExpiresAfter: openai.BatchNewParamsOutputExpiresAfter{Seconds: secs}})
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest {
			t.Errorf("output_expires_after %d: %v, want 400", secs, err)
		}
	}
	b, err := c.Batches.New(context.Background(), openai.BatchNewParams{InputFileID: f.ID,
		Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h,
		OutputExpiresAfter: openai.BatchNewParamsOutputExpiresAfter{Seconds: 7200}})
	if err != nil {
		t.Fatal(err)
	}
	b = getBatch(t, c, b.ID)
	if b.Status != openai.BatchStatusCompleted {
		t.Fatalf("status %s", b.Status)
	}
	out, err := c.Files.Get(context.Background(), b.OutputFileID)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.ExpiresAt - out.CreatedAt; got != 3600 {
		t.Errorf("output file kept %ds, want 3600 (7200 scaled by 0.5)", got)
	}
	if lines := download(t, c, b.OutputFileID); len(lines) != 3 {
		t.Fatalf("%d output lines", len(lines))
	}
	clk.Advance(time.Hour)
	if _, err := c.Files.Get(context.Background(), b.OutputFileID); err == nil {
		t.Error("expired output file: metadata still answered")
	}
	if _, err := c.Files.Content(context.Background(), b.OutputFileID); err == nil {
		t.Error("expired output file: content still answered")
	}
	st := s.Stats()
	if st.ResultsExpired != 2 || len(st.ResultDownloads) != 1 || st.ResultDownloads[0] != b.ID {
		t.Errorf("stats: results_expired %d, result_downloads %v", st.ResultsExpired, st.ResultDownloads)
	}
	if st.OutputExpiresAfter["7200"] != 1 || len(st.OutputExpiresAfter) != 1 {
		t.Errorf("stats: output_expires_after %v", st.OutputExpiresAfter)
	}
}
