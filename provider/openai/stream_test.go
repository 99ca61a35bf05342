package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider/openai"
)

// resultServer serves result files at /v1/files/{id}/content; cut, when
// set, decides per download (numbered from 0 per file) to send only the
// first n bytes of the file under its whole Content-Length and drop the
// connection.
type resultServer struct {
	files map[string]string
	mu    sync.Mutex
	gets  map[string]int
	cut   func(id string, n int) (int, bool)
}

func (s *resultServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/files/"), "/content")
	s.mu.Lock()
	body, ok := s.files[id]
	s.mu.Unlock()
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"error":{"message":"No such File object: %s","type":"invalid_request_error"}}`, id)
		return
	}
	s.mu.Lock()
	n := s.gets[id]
	s.gets[id] = n + 1
	cut := s.cut
	s.mu.Unlock()
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if cut != nil {
		if at, ok := cut(id, n); ok {
			w.WriteHeader(http.StatusOK)
			w.Write([]byte(body[:at]))
			http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		}
	}
	io.WriteString(w, body)
}

// setCut starts a new round of downloads, cut by cut.
func (s *resultServer) setCut(cut func(id string, n int) (int, bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gets, s.cut = map[string]int{}, cut
}

// downloads is how many downloads of id this round had.
func (s *resultServer) downloads(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets[id]
}

func newResultServer(t *testing.T, files map[string]string) (*resultServer, string) {
	s := &resultServer{files: files, gets: map[string]int{}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv.URL + "/v1"
}

// hostileFiles is an output file and an error file with every kind of line
// Decode meets: good lines, duplicates, a line over a 200-byte bound, lines
// that are not JSON or lack a custom_id, a last line cut short, error-file
// lines.
func hostileFiles() map[string]string {
	ok := func(id string) string {
		return `{"custom_id":"` + id + `","response":{"status_code":200,"body":{"usage":{"prompt_tokens":3,"completion_tokens":4}}}}`
	}
	return map[string]string{
		"file-out": strings.Join([]string{
			ok("a"),
			`not json at all`,
			`{"id":"batch_req_1","response":{"status_code":200,"body":{}}}`,
			`{"custom_id":"long","response":{"status_code":200,"body":{"x":"` + strings.Repeat("x", 300) + `"}}}`,
			ok("b"),
			`{"custom_id":"r","response":{"status_code":429,"body":{"error":{"message":"slow down"}}}}`,
			ok("a"),
			"",
			`{"custom_id":"c","response":{"status_co`, // the last line, cut short
		}, "\n"),
		"file-err": `{"custom_id":"d","response":null,"error":{"code":"batch_expired","message":"m"}}` + "\n" + `{]` + "\n" +
			`{"custom_id":"e","response":{"status_code":400,"body":{"error":{"message":"bad"}}}}` + "\n",
	}
}

// collect returns fn recording every result as JSON, in order.
func collect(got *[]string) func(sluice.Result) error {
	return func(r sluice.Result) error {
		b, err := json.Marshal(r)
		*got = append(*got, string(b))
		return err
	}
}

func malformedOf(t *testing.T, err error) string {
	t.Helper()
	var ml *sluice.MalformedLines
	if !errors.As(err, &ml) {
		t.Fatalf("err %v, want malformed lines", err)
	}
	return fmt.Sprintf("%d: %s", ml.Count, ml.Summary(sluice.MalformedKept))
}

// TestStreamResultsMatchFetchDecode: reading a batch's results as they
// download gives what Fetch then Decode gives: the same results in the
// same order (duplicates, error-file lines and all) and the same malformed
// lines, named alike; a missing error file is no error; nothing is
// written to disk.
func TestStreamResultsMatchFetchDecode(t *testing.T) {
	_, base := newResultServer(t, hostileFiles())
	c := newClient(t, "openai", base, func(cfg *openai.Config) { cfg.MaxLine = 200 })
	ctx := context.Background()
	for _, b := range []sluice.Batch{
		{ID: "batch_1", Status: sluice.BatchCompleted, OutputFileID: "file-out", ErrorFileID: "file-err"},
		{ID: "batch_2", Status: sluice.BatchCompleted, OutputFileID: "file-out", ErrorFileID: "file-gone"},
	} {
		files, err := c.Fetch(ctx, sluice.BatchRef{}, b, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		var want, got []string
		wantErr := c.Decode(ctx, sluice.BatchRef{}, files, nil, collect(&want))
		gotErr := c.StreamResults(ctx, sluice.BatchRef{}, b, nil, collect(&got))
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s: streamed results\n%s\nwant (Fetch, Decode)\n%s", b.ID, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if g, w := malformedOf(t, gotErr), malformedOf(t, wantErr); g != w {
			t.Errorf("%s: streamed malformed lines %s, want %s", b.ID, g, w)
		}
		t.Logf("%s: %d results; malformed %s", b.ID, len(got), malformedOf(t, gotErr))
	}
	// The callback's own error ends it at once, as it is.
	stop := errors.New("stop")
	if err := c.StreamResults(ctx, sluice.BatchRef{}, sluice.Batch{ID: "b", OutputFileID: "file-out"}, nil, func(sluice.Result) error { return stop }); err != stop {
		t.Errorf("callback error: %v", err)
	}
	// A missing output file is a failed download naming the 404.
	err := c.StreamResults(ctx, sluice.BatchRef{}, sluice.Batch{ID: "b", OutputFileID: "file-lost"}, nil, func(sluice.Result) error { return nil })
	if !errors.Is(err, sluice.ErrNotFound) || errors.Is(err, sluice.ErrMalformed) {
		t.Errorf("lost output file: %v, want not found", err)
	}
}

// TestStreamResultsCutMidway: a download cut before any result was handed
// on is repeated by the HTTP layer, the lines skipped before the cut not
// counted twice; one cut after results were handed on ends the call with
// sluice.ErrStreamBroken, without repeating it (the caller starts over).
func TestStreamResultsCutMidway(t *testing.T) {
	files := hostileFiles()
	s, base := newResultServer(t, files)
	c := newClient(t, "openai", base, func(cfg *openai.Config) { cfg.MaxLine = 200 })
	ctx := context.Background()
	b := sluice.Batch{ID: "batch_1", Status: sluice.BatchCompleted, OutputFileID: "file-out", ErrorFileID: "file-err"}
	var want []string
	wantErr := c.StreamResults(ctx, sluice.BatchRef{}, b, nil, collect(&want))

	// The error file cut inside its malformed second line, after its first
	// line was handed on: not repeated.
	s.setCut(func(id string, n int) (int, bool) {
		return strings.Index(files[id], "{]") + 1, id == "file-err"
	})
	var got []string
	err := c.StreamResults(ctx, sluice.BatchRef{}, b, nil, collect(&got))
	if !errors.Is(err, sluice.ErrStreamBroken) || s.downloads("file-err") != 1 {
		t.Fatalf("err %v after %d downloads of the error file; want it broken after 1", err, s.downloads("file-err"))
	}

	// The output file cut inside its first line, twice: repeated, and
	// every result handed on once.
	s.setCut(func(id string, n int) (int, bool) { return 10, id == "file-out" && n < 2 })
	got = got[:0]
	err = c.StreamResults(ctx, sluice.BatchRef{}, b, nil, collect(&got))
	if strings.Join(got, "\n") != strings.Join(want, "\n") || s.downloads("file-out") != 3 {
		t.Errorf("after %d downloads: results\n%s\nwant\n%s", s.downloads("file-out"), strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if g, w := malformedOf(t, err), malformedOf(t, wantErr); g != w {
		t.Errorf("malformed lines %s, want %s", g, w)
	}

	// A file whose first lines are malformed, cut after them (nothing
	// handed on yet): repeated, its malformed lines counted once.
	s.mu.Lock()
	files["file-bad-first"] = "not json\n{]\n" + `{"custom_id":"z","response":{"status_code":200,"body":{}}}` + "\n"
	s.mu.Unlock()
	s.setCut(func(id string, n int) (int, bool) { return len("not json\n{]\n"), n == 0 })
	got = got[:0]
	err = c.StreamResults(ctx, sluice.BatchRef{}, sluice.Batch{ID: "batch_3", OutputFileID: "file-bad-first"}, nil, collect(&got))
	if m := malformedOf(t, err); len(got) != 1 || s.downloads("file-bad-first") != 2 || !strings.HasPrefix(m, "2: batch_3.output.jsonl:1 ") {
		t.Errorf("after %d downloads: %d results, malformed %s; want 1 result, 2 malformed lines", s.downloads("file-bad-first"), len(got), m)
	}
}
