package dispatcher_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/dispatcher"
	"github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/httpx"
	"github.com/sluice-batch/sluice/provider/openai"
)

// watchedStore is the rig's store, looking at the job's directory when a
// chunk is recorded (FinishChunk) and when a poll is recorded as failed to
// get its results (UpdateChunk with results_unavailable).
type watchedStore struct {
	sluice.Store
	onFinish func(*sluice.Finish)
	onFailed func(*sluice.Chunk)
}

func (s *watchedStore) FinishChunk(ctx context.Context, f *sluice.Finish) error {
	if s.onFinish != nil {
		s.onFinish(f)
	}
	return s.Store.FinishChunk(ctx, f)
}

func (s *watchedStore) UpdateChunk(ctx context.Context, c *sluice.Chunk, from sluice.ChunkState) error {
	err := s.Store.UpdateChunk(ctx, c, from)
	if err == nil && s.onFailed != nil && c.ErrorCode == sluice.CodeResultsUnavailable {
		s.onFailed(c)
	}
	return err
}

// rawFiles lists the raw result files under the job's results directory.
func rawFiles(t *testing.T, r *rig) []string {
	t.Helper()
	raws, err := filepath.Glob(filepath.Join(r.job.Dir, "results", "raw-*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	return raws
}

// TestStreamedResultsLeaveNoRawFile: the OpenAI family's results are
// decoded as they download: when each chunk is recorded (its results file
// committed, the raw files of Fetch still there when Fetch is used), no raw
// result file was written. Anthropic, which has no stream, still fetches
// to files: the check sees them.
func TestStreamedResultsLeaveNoRawFile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		preset string
		lines  []string
		raw    bool
	}{
		{"openai", openAILines(20), false},
		{"mistral", chatLines(20), false},
		{"together", chatLines(20), false},
		{"anthropic", anthropicLines(10), true},
	} {
		t.Run(tc.preset, func(t *testing.T) {
			r := newRig(t, tc.preset, tc.lines, sluice.Limits{MaxBatchRequests: 5}, 3, emulator.Options{Seed: 4, LineErrorRate: 0.3})
			_, streams := r.prov.(sluice.ResultStreamer)
			if streams == tc.raw {
				t.Fatalf("%s: streams results %v", tc.preset, streams)
			}
			var mu sync.Mutex
			finishes, withRaw := 0, 0
			store := &watchedStore{Store: r.db, onFinish: func(*sluice.Finish) {
				mu.Lock()
				defer mu.Unlock()
				finishes++
				if raws := rawFiles(t, r); len(raws) > 0 {
					withRaw++
					if !tc.raw {
						t.Errorf("raw result files written: %v", raws)
					}
				}
			}}
			runWith(t, r, store, r.options())
			if finishes == 0 || tc.raw && withRaw != finishes {
				t.Errorf("%d chunks recorded, %d with raw files beside them", finishes, withRaw)
			}
			// Lines the emulator answered with an error are run again.
			got, _ := checkNothingLost(t, r, r.emu.Stats().LinesErrored)
			if got == 0 || r.emu.Stats().LinesErrored == 0 {
				t.Errorf("%d successes, %d error lines: the test proves little", got, r.emu.Stats().LinesErrored)
			}
		})
	}
}

// cutProxy stands between the client and the emulator and cuts result
// downloads (GET .../files/{id}/content): the first cuts downloads of each
// file answer 200 with the whole Content-Length but stop a few bytes after
// the first line's end and drop the connection, so a stream has handed a
// result on when it breaks.
type cutProxy struct {
	t    *testing.T
	up   string
	cuts int
	rp   *httputil.ReverseProxy

	mu   sync.Mutex
	seen map[string]int
	cut  int
}

func newCutProxy(t *testing.T, upstream string, cuts int) (*cutProxy, string) {
	u, _ := url.Parse(upstream)
	p := &cutProxy{t: t, up: upstream, cuts: cuts, rp: httputil.NewSingleHostReverseProxy(u), seen: map[string]int{}}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv.URL
}

func (p *cutProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/content") {
		p.rp.ServeHTTP(w, r)
		return
	}
	req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, p.up+r.URL.RequestURI(), nil)
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	p.mu.Lock()
	n := p.seen[r.URL.Path]
	p.seen[r.URL.Path] = n + 1
	at := bytes.IndexByte(body, '\n') + 5
	cut := resp.StatusCode == http.StatusOK && n < p.cuts && at > 5 && at < len(body)
	if cut {
		p.cut++
	}
	p.mu.Unlock()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(resp.StatusCode)
	if !cut {
		w.Write(body)
		return
	}
	w.Write(body[:at])
	http.NewResponseController(w).Flush()
	panic(http.ErrAbortHandler)
}

// TestStreamCutMidway: a result download cut after some results were
// read leaves nothing recorded of them. Cut once, the chunk's results are
// read again at once (from files) and no fetch try is spent; cut on every
// HTTP retry of that too, the poll is a failed fetch: the chunk stays
// submitted, its requests pending, no results file, and the next poll
// records it. Either way every custom_id is recorded exactly once and
// nothing is bought twice.
func TestStreamCutMidway(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		cuts       int
		wantFailed bool
	}{
		{"once", 1, false},
		{"every retry", 1 + fastRetry.MaxAttempts, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := openAILines(24)
			r := newRig(t, "openai", lines, sluice.Limits{MaxBatchRequests: 4}, 3, emulator.Options{Seed: 6})
			proxy, base := newCutProxy(t, r.url, tc.cuts)
			p, _ := provider.Lookup("openai")
			prov, err := openai.New(openai.Config{Config: provider.Config{Preset: p, BaseURL: base + "/v1", APIKey: "k", Retry: fastRetry, RateLimit: httpx.RateLimit{PerSecond: -1}}})
			if err != nil {
				t.Fatal(err)
			}
			r.prov = prov
			var mu sync.Mutex
			failed := map[int64]int{}
			store := &watchedStore{Store: r.db, onFailed: func(c *sluice.Chunk) {
				mu.Lock()
				defer mu.Unlock()
				failed[c.ID] = c.FetchFailures
				// Nothing of the cut stream is recorded.
				if c.State != sluice.ChunkSubmitted {
					t.Errorf("chunk %d: %s after a failed fetch", c.ID, c.State)
				}
				if err := r.db.ChunkRequests(context.Background(), r.job.ID, c.ID, func(q *sluice.Request) error {
					if q.State != sluice.RequestPending {
						t.Errorf("chunk %d: request %s %s after a failed fetch", c.ID, q.CustomID, q.State)
					}
					return nil
				}); err != nil {
					t.Error(err)
				}
				res := filepath.Join(r.job.Dir, "results", "c"+leftPad(c.ID)+"-a"+strconv.Itoa(c.Attempt)+".results")
				if _, err := os.Stat(res); !os.IsNotExist(err) {
					t.Errorf("chunk %d: results file %s after a failed fetch (%v)", c.ID, res, err)
				}
			}}
			o := r.options()
			o.MaxFetchFailures = 2
			runWith(t, r, store, o)
			proxy.mu.Lock()
			cut := proxy.cut
			proxy.mu.Unlock()
			if cut == 0 {
				t.Fatal("no download was cut: the test proves nothing")
			}
			if tc.wantFailed != (len(failed) > 0) {
				t.Errorf("polls that failed to get results, by chunk: %v", failed)
			}
			for id, n := range failed {
				if n != 1 {
					t.Errorf("chunk %d: %d fetch failures, want 1", id, n)
				}
			}
			ok := checkAllSucceeded(t, r, 0, int64(len(lines)), "")
			if st := r.emu.Stats(); st.LinesSucceeded != ok {
				t.Errorf("emulator delivered %d successes, output has %d", st.LinesSucceeded, ok)
			}
		})
	}
}

// runWith is rig.run on another store.
func runWith(t *testing.T, r *rig, store sluice.Store, o dispatcher.Options) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := dispatcher.New(store, r.prov, r.job, o).Run(ctx, nil); err != nil || out != dispatcher.Finished {
		t.Fatalf("run: %v, %v", out, err)
	}
}

func leftPad(id int64) string {
	s := strconv.FormatInt(id, 10)
	return strings.Repeat("0", max(0, 6-len(s))) + s
}
