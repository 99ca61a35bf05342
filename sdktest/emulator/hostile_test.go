package emulator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
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

// What a client sees of the hostile-output knobs, per family.

// The emulator's family names (its unexported fam* constants; the names
// in Family and in the HostileFamilies option).
const (
	famOpenAI     = "openai"
	famAnthropic  = "anthropic"
	famCloudflare = "cloudflare"
)

var families = []string{famOpenAI, famAnthropic, famCloudflare}

// hostileBatch is one batch of n requests run to its end, as raw result
// lines: OpenAI output then error file, Anthropic results, Cloudflare
// result.responses items. ids are the custom_ids sent.
type hostileBatch struct {
	id    string
	lines [][]byte
	ids   []string
}

// runRaw creates a batch of n requests of family fam and reads it back raw
// once it has ended (BatchTime 0: at the first read).
func runRaw(t *testing.T, ts *httptest.Server, fam string, n int) hostileBatch {
	t.Helper()
	var hb hostileBatch
	switch fam {
	case famOpenAI:
		c := oaClient(ts)
		b := submit(t, c, "sluice-j-c1-a1.jsonl", emutest.ChatLines(n, "m"), openai.BatchNewParamsEndpointV1ChatCompletions)
		b = getBatch(t, c, b.ID)
		if b.Status != openai.BatchStatusCompleted {
			t.Fatalf("openai batch %s", b.Status)
		}
		hb.id = b.ID
		for _, f := range []string{b.OutputFileID, b.ErrorFileID} {
			if f == "" {
				continue
			}
			code, _, body := emutest.Do(t, "GET", ts.URL+"/v1/files/"+f+"/content", nil, nil)
			if code != 200 {
				t.Fatalf("content of %s: %d %s", f, code, body)
			}
			hb.lines = append(hb.lines, splitLines(body)...)
		}
		for i := range n {
			hb.ids = append(hb.ids, fmt.Sprintf("req-%d", i))
		}
	case famAnthropic:
		ac := antClient(ts)
		b, err := ac.Messages.Batches.New(context.Background(), anthropic.MessageBatchNewParams{Requests: antRequests(n, "a")})
		if err != nil {
			t.Fatal(err)
		}
		if b, _ = ac.Messages.Batches.Get(context.Background(), b.ID, anthropic.MessageBatchGetParams{}); b.ProcessingStatus != "ended" {
			t.Fatalf("anthropic batch %s", b.ProcessingStatus)
		}
		hb.id = b.ID
		code, _, body := emutest.Do(t, "GET", ts.URL+"/v1/messages/batches/"+b.ID+"/results", nil, nil)
		if code != 200 {
			t.Fatalf("results: %d %s", code, body)
		}
		hb.lines = splitLines(body)
		for i := range n {
			hb.ids = append(hb.ids, fmt.Sprintf("a-%d", i))
		}
	default:
		var reqs []any
		for i := range n {
			ref := fmt.Sprintf("cf-%d", i)
			reqs = append(reqs, map[string]any{"prompt": "tell me " + ref, "external_reference": ref})
			hb.ids = append(hb.ids, ref)
		}
		_, _, q := emutest.CFCall(t, emutest.CFURL(ts, emutest.CFLlama, true), map[string]any{"requests": reqs})
		hb.id = q.RequestID
		code, _, body := emutest.Do(t, "POST", emutest.CFURL(ts, emutest.CFLlama, true), []byte(`{"request_id":"`+q.RequestID+`"}`), map[string]string{"Authorization": "Bearer tok"})
		var ans struct {
			Result struct {
				Responses []json.RawMessage `json:"responses"`
			} `json:"result"`
		}
		if err := json.Unmarshal(body, &ans); code != 200 || err != nil {
			t.Fatalf("cloudflare answer must stay one valid document: %d %v %s", code, err, body)
		}
		for _, r := range ans.Result.Responses {
			hb.lines = append(hb.lines, r)
		}
	}
	return hb
}

func splitLines(b []byte) [][]byte {
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if l = bytes.TrimSpace(l); len(l) > 0 {
			out = append(out, l)
		}
	}
	return out
}

// resultID is the custom_id a result line names, "" when it names none or
// is not a JSON object.
func resultID(fam string, line []byte) string {
	var m struct {
		CustomID          string `json:"custom_id"`
		ExternalReference string `json:"external_reference"`
	}
	if json.Unmarshal(line, &m) != nil {
		return ""
	}
	if fam == famCloudflare {
		return m.ExternalReference
	}
	return m.CustomID
}

// succeeded reports whether a result line is a success.
func succeeded(fam string, line []byte) bool {
	var m struct {
		Response *struct {
			StatusCode int `json:"status_code"`
		} `json:"response"`
		Result *struct {
			Type string `json:"type"`
		} `json:"result"`
		Success *bool `json:"success"`
	}
	if json.Unmarshal(line, &m) != nil {
		return false
	}
	switch fam {
	case famOpenAI:
		return m.Response != nil && m.Response.StatusCode == 200
	case famAnthropic:
		return m.Result != nil && m.Result.Type == "succeeded"
	}
	return m.Success != nil && *m.Success
}

func TestHostileMalformedLines(t *testing.T) {
	for _, fam := range families {
		t.Run(fam, func(t *testing.T) {
			s, ts := start(t, Options{MalformedLineRate: 0.3, Seed: 4})
			const n = 40
			hb := runRaw(t, ts, fam, n)
			var good, notJSON, noID int
			seen := map[string]bool{}
			for _, l := range hb.lines {
				id := resultID(fam, l)
				switch {
				case !json.Valid(l) || fam == famCloudflare && l[0] == '"':
					// One Cloudflare document: its "cut" items are bare strings.
					notJSON++
				case id == "":
					noID++
				default:
					if seen[id] || !slices.Contains(hb.ids, id) {
						t.Errorf("line for %q seen twice or never sent", id)
					}
					seen[id] = true
					good++
				}
			}
			bad := notJSON + noID
			if len(hb.lines) != n || good+bad != n || notJSON == 0 || noID == 0 {
				t.Fatalf("%d lines: %d good, %d not JSON, %d without custom_id", len(hb.lines), good, notJSON, noID)
			}
			st := s.Stats()
			if st.LinesMalformed != int64(bad) || st.LinesSucceeded != int64(good) || st.RequestsProcessed != n {
				t.Errorf("stats malformed %d succeeded %d processed %d; want %d, %d, %d", st.LinesMalformed, st.LinesSucceeded, st.RequestsProcessed, bad, good, n)
			}
		})
	}
}

func TestHostileUnknownCustomIDs(t *testing.T) {
	for _, fam := range families {
		t.Run(fam, func(t *testing.T) {
			s, ts := start(t, Options{UnknownCustomIDRate: 0.3, Seed: 6})
			const n = 40
			hb := runRaw(t, ts, fam, n)
			count := map[string]int{}
			ghosts := 0
			for _, l := range hb.lines {
				id := resultID(fam, l)
				if slices.Contains(hb.ids, id) {
					count[id]++
					continue
				}
				if !strings.HasPrefix(id, "ghost-") || !succeeded(fam, l) {
					t.Errorf("extra line %s", l)
				}
				if fam == famCloudflare {
					var it struct{ ID int }
					json.Unmarshal(l, &it)
					if it.ID < n {
						t.Errorf("ghost item carries index %d of the batch", it.ID)
					}
				}
				ghosts++
			}
			for _, id := range hb.ids {
				if count[id] != 1 {
					t.Errorf("%s: %d lines", id, count[id])
				}
			}
			st := s.Stats()
			if ghosts == 0 || st.LinesUnknown != int64(ghosts) || st.LinesSucceeded != n {
				t.Errorf("ghosts %d, stats unknown %d succeeded %d", ghosts, st.LinesUnknown, st.LinesSucceeded)
			}
		})
	}
}

func TestHostileDuplicateLines(t *testing.T) {
	for _, fam := range families {
		t.Run(fam, func(t *testing.T) {
			s, ts := start(t, Options{DuplicateLineRate: 0.3, LineErrorRate: 0.2, Seed: 8})
			const n = 60
			hb := runRaw(t, ts, fam, n)
			byID := map[string][][]byte{}
			for _, l := range hb.lines {
				byID[resultID(fam, l)] = append(byID[resultID(fam, l)], l)
			}
			dups, conflicts, successes := 0, 0, 0
			for _, id := range hb.ids {
				ls := byID[id]
				switch len(ls) {
				case 1:
				case 2:
					dups++
					a, b := succeeded(fam, ls[0]), succeeded(fam, ls[1])
					switch {
					case a == b && !bytes.Equal(ls[0], ls[1]):
						t.Errorf("%s: two different lines of the same outcome:\n%s\n%s", id, ls[0], ls[1])
					case a != b:
						conflicts++
						// OpenAI's copy is in the error file, read after the
						// output file; elsewhere the error comes first.
						if fam != famOpenAI && a {
							t.Errorf("%s: the conflicting error copy must come before the success", id)
						}
					}
				default:
					t.Fatalf("%s: %d lines", id, len(ls))
				}
				if slices.ContainsFunc(ls, func(l []byte) bool { return succeeded(fam, l) }) {
					successes++
				}
			}
			st := s.Stats()
			if dups == 0 || conflicts == 0 || st.LinesDuplicated != int64(dups) || st.LinesSucceeded != int64(successes) {
				t.Errorf("dups %d conflicts %d successes %d; stats duplicated %d succeeded %d", dups, conflicts, successes, st.LinesDuplicated, st.LinesSucceeded)
			}
		})
	}
}

// getCut GETs (or POSTs) url and returns the promised length and the read
// error.
func getCut(t *testing.T, method, url, body string) (int64, int, error) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer tok") // Cloudflare refuses a call without credentials
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.ContentLength, len(b), err
}

func TestHostileTruncatedDownloads(t *testing.T) {
	s, ts := start(t, Options{TruncateDownloadRate: 1, Seed: 1})
	c := oaClient(ts)
	b := chatBatch(t, c, 10)
	b = getBatch(t, c, b.ID)
	promised, got, err := getCut(t, "GET", ts.URL+"/v1/files/"+b.OutputFileID+"/content", "")
	if !errors.Is(err, io.ErrUnexpectedEOF) || promised < 100 || int64(got) != promised/2 {
		t.Fatalf("openai: promised %d, got %d, err %v; want half and an unexpected EOF", promised, got, err)
	}
	// The input file (purpose batch) is never cut.
	if _, _, err := getCut(t, "GET", ts.URL+"/v1/files/"+b.InputFileID+"/content", ""); err != nil {
		t.Fatalf("input file: %v", err)
	}
	ac := antClient(ts)
	ab, _ := ac.Messages.Batches.New(context.Background(), anthropic.MessageBatchNewParams{Requests: antRequests(5, "t")})
	ac.Messages.Batches.Get(context.Background(), ab.ID, anthropic.MessageBatchGetParams{})
	if promised, got, err := getCut(t, "GET", ts.URL+"/v1/messages/batches/"+ab.ID+"/results", ""); !errors.Is(err, io.ErrUnexpectedEOF) || int64(got) != promised/2 {
		t.Fatalf("anthropic: promised %d, got %d, err %v", promised, got, err)
	}
	_, _, q := emutest.CFCall(t, emutest.CFURL(ts, emutest.CFLlama, true), map[string]any{"requests": []any{map[string]any{"prompt": "p", "external_reference": "r"}}})
	if promised, got, err := getCut(t, "POST", emutest.CFURL(ts, emutest.CFLlama, true), `{"request_id":"`+q.RequestID+`"}`); !errors.Is(err, io.ErrUnexpectedEOF) || int64(got) != promised/2 {
		t.Fatalf("cloudflare: promised %d, got %d, err %v", promised, got, err)
	}
	if st := s.Stats(); st.DownloadsTruncated != 3 {
		t.Errorf("downloads truncated %d, want 3", st.DownloadsTruncated)
	}

	// At a partial rate, downloads are drawn again each time: a retrying
	// client gets the whole file.
	_, ts = start(t, Options{TruncateDownloadRate: 0.5, Seed: 2})
	c = oaClient(ts)
	b = chatBatch(t, c, 10)
	b = getBatch(t, c, b.ID)
	cut, whole := 0, 0
	for range 20 {
		if _, _, err := getCut(t, "GET", ts.URL+"/v1/files/"+b.OutputFileID+"/content", ""); err != nil {
			cut++
		} else {
			whole++
		}
	}
	if cut == 0 || whole == 0 {
		t.Errorf("20 downloads at rate 0.5: %d cut, %d whole", cut, whole)
	}
}

func TestHostileOutputFile404(t *testing.T) {
	s, ts := start(t, Options{OutputFile404Rate: 1, LineErrorRate: 0.3, Seed: 3})
	c := oaClient(ts)
	b := chatBatch(t, c, 20)
	b = getBatch(t, c, b.ID)
	if b.Status != openai.BatchStatusCompleted || b.OutputFileID == "" {
		t.Fatalf("batch %s", b.RawJSON())
	}
	if code, _, body := emutest.Do(t, "GET", ts.URL+"/v1/files/"+b.OutputFileID+"/content", nil, nil); code != 404 || !strings.Contains(string(body), "No such File") {
		t.Fatalf("output content: %d %s", code, body)
	}
	if code, _, _ := emutest.Do(t, "GET", ts.URL+"/v1/files/"+b.OutputFileID, nil, nil); code != 200 {
		t.Errorf("the file object stays: %d", code)
	}
	errLines := download(t, c, b.ErrorFileID) // the error file is intact
	if len(errLines) == 0 {
		t.Fatal("no error lines")
	}
	st := s.Stats()
	if st.LinesLost != int64(20-len(errLines)) || st.LinesSucceeded != 0 || st.RequestsProcessed != 20 {
		t.Errorf("stats lost %d succeeded %d processed %d", st.LinesLost, st.LinesSucceeded, st.RequestsProcessed)
	}

	ac := antClient(ts)
	ab, _ := ac.Messages.Batches.New(context.Background(), anthropic.MessageBatchNewParams{Requests: antRequests(5, "l")})
	ab, _ = ac.Messages.Batches.Get(context.Background(), ab.ID, anthropic.MessageBatchGetParams{})
	if code, _, body := emutest.Do(t, "GET", ts.URL+"/v1/messages/batches/"+ab.ID+"/results", nil, nil); ab.ProcessingStatus != "ended" || code != 404 || !strings.Contains(string(body), "not_found_error") {
		t.Fatalf("anthropic results: %s %d %s", ab.ProcessingStatus, code, body)
	}
	// Cloudflare is not affected: its results come in the poll answer.
	if hb := runRaw(t, ts, famCloudflare, 3); len(hb.lines) != 3 {
		t.Fatalf("cloudflare: %d items", len(hb.lines))
	}
}

func TestHostileStuckBatches(t *testing.T) {
	const n = 6
	t.Run("finalizing", func(t *testing.T) {
		clk := emutest.NewClock()
		s, ts := start(t, Options{StuckRate: 1, Now: clk.Now})
		c := oaClient(ts)
		b := chatBatch(t, c, n)
		ac := antClient(ts)
		ab, _ := ac.Messages.Batches.New(context.Background(), anthropic.MessageBatchNewParams{Requests: antRequests(n, "s")})
		_, _, q := emutest.CFCall(t, emutest.CFURL(ts, emutest.CFLlama, true), map[string]any{"requests": []any{map[string]any{"prompt": "p"}}})
		clk.Advance(48 * time.Hour) // twice the window: nothing expires
		if b = getBatch(t, c, b.ID); b.Status != openai.BatchStatusFinalizing || b.RequestCounts.Completed != n {
			t.Fatalf("openai: %s", b.RawJSON())
		}
		if ab, _ = ac.Messages.Batches.Get(context.Background(), ab.ID, anthropic.MessageBatchGetParams{}); ab.ProcessingStatus != "in_progress" {
			t.Fatalf("anthropic: %s", ab.ProcessingStatus)
		}
		if _, _, p := emutest.CFCall(t, emutest.CFURL(ts, emutest.CFLlama, true), map[string]any{"request_id": q.RequestID}); p.Status != "running" {
			t.Fatalf("cloudflare: %+v", p)
		}
		// A cancel ends it, with every line's result.
		b, err := c.Batches.Cancel(context.Background(), b.ID)
		if err != nil || b.Status != openai.BatchStatusCancelling {
			t.Fatalf("cancel: %v %s", err, b.Status)
		}
		clk.Advance(time.Second)
		if b = getBatch(t, c, b.ID); b.Status != openai.BatchStatusCancelled || len(download(t, c, b.OutputFileID)) != n {
			t.Fatalf("cancelled: %s", b.RawJSON())
		}
		ac.Messages.Batches.Cancel(context.Background(), ab.ID, anthropic.MessageBatchCancelParams{})
		clk.Advance(time.Second)
		kinds := map[string]int{}
		for _, r := range antResults(t, ac, ab.ID) {
			kinds[r.typ]++
		}
		if kinds["succeeded"] != n {
			t.Fatalf("anthropic after cancel: %v", kinds)
		}
		if st := s.Stats(); st.BatchesStuck != 3 || st.LinesSucceeded != 2*n {
			t.Errorf("stats stuck %d succeeded %d", st.BatchesStuck, st.LinesSucceeded)
		}
	})
	t.Run("validating", func(t *testing.T) {
		clk := emutest.NewClock()
		s, ts := start(t, Options{StuckRate: 1, StuckPhase: "validating", Now: clk.Now})
		c := oaClient(ts)
		b := chatBatch(t, c, n)
		ac := antClient(ts)
		ab, _ := ac.Messages.Batches.New(context.Background(), anthropic.MessageBatchNewParams{Requests: antRequests(n, "v")})
		_, _, q := emutest.CFCall(t, emutest.CFURL(ts, emutest.CFLlama, true), map[string]any{"requests": []any{map[string]any{"prompt": "p"}}})
		clk.Advance(48 * time.Hour)
		if b = getBatch(t, c, b.ID); b.Status != openai.BatchStatusValidating {
			t.Fatalf("openai: %s", b.RawJSON())
		}
		if _, _, p := emutest.CFCall(t, emutest.CFURL(ts, emutest.CFLlama, true), map[string]any{"request_id": q.RequestID}); p.Status != "queued" {
			t.Fatalf("cloudflare: %+v", p)
		}
		c.Batches.Cancel(context.Background(), b.ID)
		ac.Messages.Batches.Cancel(context.Background(), ab.ID, anthropic.MessageBatchCancelParams{})
		clk.Advance(time.Second)
		if b = getBatch(t, c, b.ID); b.Status != openai.BatchStatusCancelled || b.OutputFileID != "" || b.ErrorFileID != "" {
			t.Fatalf("cancelled while validating: %s", b.RawJSON())
		}
		kinds := map[string]int{}
		for _, r := range antResults(t, ac, ab.ID) {
			kinds[r.typ]++
		}
		if kinds["canceled"] != n {
			t.Fatalf("anthropic after cancel: %v", kinds)
		}
		if st := s.Stats(); st.RequestsProcessed != 0 {
			t.Errorf("processed %d, want none", st.RequestsProcessed)
		}
	})
	if _, err := New(Options{StuckPhase: "in_progress"}); err == nil {
		t.Error("an unknown stuck phase must be refused")
	}
}

func TestHostileForgottenBatches(t *testing.T) {
	s, ts := start(t, Options{ForgetBatchRate: 1})
	c := oaClient(ts)
	b := chatBatch(t, c, 3)
	if code, _, body := emutest.Do(t, "GET", ts.URL+"/v1/batches/"+b.ID, nil, nil); code != 404 {
		t.Fatalf("openai poll: %d %s", code, body)
	}
	if _, _, body := emutest.Do(t, "GET", ts.URL+"/v1/batches", nil, nil); strings.Contains(string(body), b.ID) {
		t.Fatal("a forgotten batch is listed")
	}
	ac := antClient(ts)
	ab, err := ac.Messages.Batches.New(context.Background(), anthropic.MessageBatchNewParams{Requests: antRequests(3, "f")})
	if err != nil || ab.ID == "" {
		t.Fatalf("create answers as usual: %v", err)
	}
	if code, _, _ := emutest.Do(t, "GET", ts.URL+"/v1/messages/batches/"+ab.ID, nil, nil); code != 404 {
		t.Fatalf("anthropic poll: %d", code)
	}
	_, _, q := emutest.CFCall(t, emutest.CFURL(ts, emutest.CFLlama, true), map[string]any{"requests": []any{map[string]any{"prompt": "p"}}})
	if code, env, _ := emutest.CFCall(t, emutest.CFURL(ts, emutest.CFLlama, true), map[string]any{"request_id": q.RequestID}); code != 400 || env.Errors[0].Code != 5004 {
		t.Fatalf("cloudflare poll: %d %+v", code, env)
	}
	if st := s.Stats(); st.BatchesForgotten != 3 || st.BatchesCreated != 3 || st.RequestsProcessed != 0 {
		t.Errorf("stats %+v", st)
	}
}
