package emulator_test

import (
	"context"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/internal/emutest"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/openai/openai-go/v3"
)

// Two emulators with the same seed and clock produce byte-identical
// results; the same input submitted twice gives the same bodies.
func TestDeterminism(t *testing.T) {
	run := func() (out []string, bodies map[string]string) {
		clk := emutest.NewClock()
		_, ts := start(t, Options{Seed: 42, Now: clk.Now, LineErrorRate: 0.2})
		c := oaClient(ts)
		f := upload(t, c, "x.jsonl", emutest.ChatLines(30, "m"))
		b1 := createBatch(t, c, f.ID, openai.BatchNewParamsEndpointV1ChatCompletions, nil)
		b2 := createBatch(t, c, f.ID, openai.BatchNewParamsEndpointV1ChatCompletions, nil)
		b1, b2 = getBatch(t, c, b1.ID), getBatch(t, c, b2.ID)
		out = download(t, c, b1.OutputFileID)
		bodies = map[string]string{}
		for _, l := range parseLines(t, out) {
			bodies[l.CustomID] = string(l.Response.Body)
		}
		same := 0
		for _, l := range parseLines(t, download(t, c, b2.OutputFileID)) {
			if want, ok := bodies[l.CustomID]; ok {
				if want != string(l.Response.Body) {
					t.Fatalf("same input, different body:\n%s\n%s", want, l.Response.Body)
				}
				same++
			}
		}
		if same == 0 {
			t.Fatal("no common successful lines to compare")
		}
		return out, bodies
	}
	out1, _ := run()
	out2, _ := run()
	if !slices.Equal(out1, out2) {
		t.Fatal("same seed and clock, different output files")
	}
	// Sync calls are deterministic too.
	_, ts := start(t, Options{})
	ac := antClient(ts)
	var texts []string
	for range 2 {
		m, err := ac.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "c", MaxTokens: 100,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("same"))}})
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, m.RawJSON())
	}
	if texts[0] != texts[1] {
		t.Fatalf("%s != %s", texts[0], texts[1])
	}
}

func TestPersistenceAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	clk := emutest.NewClock()
	opts := Options{DataDir: dir, BatchTime: 10 * time.Second, Now: clk.Now, Seed: 1, Logf: t.Logf}
	s1, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ts1 := httptest.NewServer(s1.Handler())
	c := oaClient(ts1)
	f := upload(t, c, "sluice-j-c0-a1.jsonl", emutest.ChatLines(8, "m"))
	done := createBatch(t, c, f.ID, openai.BatchNewParamsEndpointV1ChatCompletions, map[string]string{"sluice_job": "j"})
	clk.Advance(10 * time.Second)
	done = getBatch(t, c, done.ID)
	running := createBatch(t, c, f.ID, openai.BatchNewParamsEndpointV1ChatCompletions, map[string]string{"sluice_job": "j2"})
	clk.Advance(3 * time.Second)
	if running = getBatch(t, c, running.ID); running.Status != openai.BatchStatusInProgress {
		t.Fatalf("running: %s", running.Status)
	}
	ac := antClient(ts1)
	ab, err := ac.Messages.Batches.New(context.Background(), anthropic.MessageBatchNewParams{Requests: antRequests(4, "p")})
	if err != nil {
		t.Fatal(err)
	}
	_, _, q := emutest.CFCall(t, emutest.CFURL(ts1, emutest.CFLlama, true), map[string]any{"requests": []any{map[string]any{"prompt": "x"}}})
	outBefore := download(t, c, done.OutputFileID)
	ts1.Close()
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}

	s2, ts2 := start(t, opts)
	c = oaClient(ts2)
	if got := getBatch(t, c, done.ID); got.Status != openai.BatchStatusCompleted || got.OutputFileID != done.OutputFileID {
		t.Fatalf("done batch after restart: %s", got.RawJSON())
	}
	if out := download(t, c, done.OutputFileID); !slices.Equal(out, outBefore) {
		t.Fatal("output changed across restart")
	}
	if in := download(t, c, f.ID); len(in) != 8 {
		t.Fatalf("input file after restart: %d lines", len(in))
	}
	clk.Advance(10 * time.Second)
	if got := getBatch(t, c, running.ID); got.Status != openai.BatchStatusCompleted || len(download(t, c, got.OutputFileID)) != 8 {
		t.Fatalf("running batch after restart: %s", got.RawJSON())
	}
	ac = antClient(ts2)
	if got, err := ac.Messages.Batches.Get(context.Background(), ab.ID, anthropic.MessageBatchGetParams{}); err != nil || got.ProcessingStatus != "ended" || len(antResults(t, ac, ab.ID)) != 4 {
		t.Fatalf("anthropic after restart: %v", err)
	}
	if _, _, p := emutest.CFCall(t, emutest.CFURL(ts2, emutest.CFLlama, true), map[string]any{"request_id": q.RequestID}); len(p.Responses) != 1 {
		t.Fatalf("cloudflare after restart: %+v", p)
	}
	st := s2.Stats()
	if st.FilesUploaded != 1 || st.BatchesCreated != 4 || st.RequestsProcessed != 8+8+4+1 {
		t.Fatalf("stats after restart %+v", st)
	}
	// The processed set survived: re-running job j's lines counts as duplicates.
	again := createBatch(t, c, f.ID, openai.BatchNewParamsEndpointV1ChatCompletions, map[string]string{"sluice_job": "j"})
	clk.Advance(10 * time.Second)
	getBatch(t, c, again.ID)
	if st := s2.Stats(); st.RequestsProcessedMoreThanOnce != 8 {
		t.Fatalf("duplicates after restart: %+v", st)
	}
	// New ids never collide with old ones.
	if again.ID == done.ID || again.ID == running.ID {
		t.Fatal("id reused after restart")
	}
}

func TestStatsDuplicateExecution(t *testing.T) {
	s, ts := start(t, Options{})
	c := oaClient(ts)
	in := emutest.ChatLines(6, "m")
	run := func(name string, md map[string]string) {
		b := createBatch(t, c, upload(t, c, name, in).ID, openai.BatchNewParamsEndpointV1ChatCompletions, md)
		getBatch(t, c, b.ID)
	}
	run("sluice-jobA-c0-a1.jsonl", nil)
	run("sluice-jobB-c0-a1.jsonl", nil) // another job: not a duplicate
	if st := s.Stats(); st.RequestsProcessed != 12 || st.RequestsProcessedMoreThanOnce != 0 {
		t.Fatalf("stats %+v", st)
	}
	run("sluice-jobA-c0-a2.jsonl", nil) // jobA retried: 6 lines bought twice
	if st := s.Stats(); st.RequestsProcessedMoreThanOnce != 6 {
		t.Fatalf("stats %+v", st)
	}
	run("whatever.jsonl", map[string]string{"sluice_job": "sluice-jobB"}) // metadata names the job
	st := s.Stats()
	if st.RequestsProcessedMoreThanOnce != 12 || st.ByFamily["openai"].RequestsProcessedMoreThanOnce != 12 {
		t.Fatalf("stats %+v", st)
	}

	// Anthropic: custom_ids are job-wide; Cloudflare: external_reference.
	ac := antClient(ts)
	for range 2 {
		b, err := ac.Messages.Batches.New(context.Background(), anthropic.MessageBatchNewParams{Requests: antRequests(3, "dup")})
		if err != nil {
			t.Fatal(err)
		}
		antResults(t, ac, b.ID)
	}
	for range 2 {
		_, _, q := emutest.CFCall(t, emutest.CFURL(ts, emutest.CFLlama, true), map[string]any{"requests": []any{
			map[string]any{"prompt": "x", "external_reference": "r1"}, map[string]any{"prompt": "y"}}})
		emutest.CFCall(t, emutest.CFURL(ts, emutest.CFLlama, true), map[string]any{"request_id": q.RequestID})
	}
	st = s.Stats()
	if st.ByFamily["anthropic"].RequestsProcessedMoreThanOnce != 3 || st.ByFamily["cloudflare"].RequestsProcessedMoreThanOnce != 1 ||
		st.RequestsProcessedMoreThanOnce != 16 {
		t.Fatalf("stats %+v", st)
	}
	code, _, body := emutest.Do(t, "GET", ts.URL+"/_emulator/stats", nil, nil)
	var wire Stats
	emutest.MustUnmarshal(t, body, &wire)
	if code != 200 || wire.RequestsProcessedMoreThanOnce != 16 || !strings.Contains(string(body), `"requests_processed_more_than_once":16`) {
		t.Fatalf("stats endpoint %s", body)
	}
}
