package emulator_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/internal/emutest"

	"github.com/openai/openai-go/v3"
)

// The default OpenAI limit: 50,000 requests pass, 50,001 fail too_many_tasks.
func TestDefaultRequestLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("large input")
	}
	_, ts := start(t, Options{Logf: func(string, ...any) {}})
	c := oaClient(ts)
	in := emutest.ChatLines(50001, "m")
	b := createBatch(t, c, upload(t, c, "big.jsonl", in).ID, openai.BatchNewParamsEndpointV1ChatCompletions, nil)
	b = getBatch(t, c, b.ID)
	if b.Status != openai.BatchStatusFailed || b.Errors.Data[0].Code != "too_many_tasks" || !strings.Contains(b.Errors.Data[0].Message, "50001") {
		t.Fatalf("50,001: %s", b.RawJSON())
	}
	cut := bytes.LastIndexByte(in[:len(in)-1], '\n') + 1
	b = createBatch(t, c, upload(t, c, "ok.jsonl", in[:cut]).ID, openai.BatchNewParamsEndpointV1ChatCompletions, nil)
	if b = getBatch(t, c, b.ID); b.Status != openai.BatchStatusCompleted || b.RequestCounts.Completed != 50000 {
		t.Fatalf("50,000: %s", b.RawJSON())
	}
}

func TestCancelWhileValidating(t *testing.T) {
	clk := emutest.NewClock()
	_, ts := start(t, Options{BatchTime: 10 * time.Second, Now: clk.Now})
	c := oaClient(ts)
	b := createBatch(t, c, upload(t, c, "x.jsonl", emutest.ChatLines(3, "m")).ID, openai.BatchNewParamsEndpointV1ChatCompletions, nil)
	if _, err := c.Batches.Cancel(context.Background(), b.ID); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	b = getBatch(t, c, b.ID)
	if b.Status != openai.BatchStatusCancelled || b.OutputFileID != "" || b.ErrorFileID != "" || b.RequestCounts.Total != 0 || b.InProgressAt != 0 {
		t.Fatalf("%s", b.RawJSON())
	}
}
