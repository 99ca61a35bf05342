package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
)

// fakeStore serves chunks and request counts to the run progress.
type fakeStore struct {
	mu      sync.Mutex
	chunks  []*sluice.Chunk
	reqs    map[sluice.RequestState]int64
	queries int
}

func (f *fakeStore) Chunks(ctx context.Context, job string) ([]*sluice.Chunk, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var cs []*sluice.Chunk
	for _, c := range f.chunks {
		cc := *c
		cs = append(cs, &cc)
	}
	return cs, nil
}

func (f *fakeStore) RequestStates(ctx context.Context, job string) (map[sluice.RequestState]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries++
	m := map[sluice.RequestState]int64{}
	for k, v := range f.reqs {
		m[k] = v
	}
	return m, nil
}

// TestLiveAreaAndLogs drives the progress display and the console logger
// on one pseudo-terminal from several goroutines (run with -race): log
// lines land above the area, the area is erased before each and redrawn
// after, lines are cut to the width, and done() leaves nothing behind.
func TestLiveAreaAndLogs(t *testing.T) {
	ptmx, tty, err := openPTY(30, 70)
	if err != nil {
		t.Skip("no pseudo-terminal:", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	var screen lockedBuffer
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			screen.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()

	g := &globalFlags{logFormat: "auto", logLevel: "info"}
	log, err := g.logger(tty)
	if err != nil {
		t.Fatal(err)
	}
	store := &fakeStore{reqs: map[sluice.RequestState]int64{sluice.RequestPending: 100}}
	for i := range 4 {
		store.chunks = append(store.chunks, &sluice.Chunk{ID: int64(i + 1), Attempt: 1, Requests: 25, State: sluice.ChunkPending})
	}
	job := &sluice.Job{ID: "j", Requests: 100}
	var skew atomic.Int64 // the throttle's clock runs this far ahead
	p := newRunProgressClock(tty, store, job, func() time.Time { return time.Now().Add(time.Duration(skew.Load())) })
	if p.area == nil {
		t.Fatal("no live area on a terminal")
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 50 {
			log.Info().Int("n", i).Msg("a log line that must stay whole")
			time.Sleep(time.Millisecond)
		}
	}()
	for step := range 4 {
		store.mu.Lock()
		store.chunks[step].State, store.chunks[step].BatchID = sluice.ChunkSubmitted, fmt.Sprintf("batch_%d", step)
		store.mu.Unlock()
		cs, _ := store.Chunks(context.Background(), "j")
		p.tick(cs)
		time.Sleep(20 * time.Millisecond)
	}
	store.mu.Lock()
	store.chunks[0].State = sluice.ChunkDone
	store.reqs = map[sluice.RequestState]int64{sluice.RequestSucceeded: 20, sluice.RequestFailed: 5, sluice.RequestPending: 75}
	store.mu.Unlock()
	cs, _ := store.Chunks(context.Background(), "j")
	p.tick(cs)
	skew.Add(int64(1200 * time.Millisecond)) // past the one-second query throttle
	cs, _ = store.Chunks(context.Background(), "j")
	p.tick(cs)
	waitUntil(t, "refreshed requests line", 10*time.Second, func() bool {
		return strings.Contains(ansi.ReplaceAllString(screen.String(), ""), "requests: 25 of 100 done: 20 succeeded, 5 failed")
	})
	wg.Wait()
	p.done()
	fmt.Fprint(tty, "END\n")
	waitUntil(t, "END on the screen", 5*time.Second, func() bool { return strings.Contains(screen.String(), "END") })
	raw := screen.String()

	text := ansi.ReplaceAllString(raw, "")
	if n := strings.Count(text, "a log line that must stay whole"); n != 50 {
		t.Errorf("%d whole log lines, want 50", n)
	}
	if !strings.Contains(text, "batches:  4 submitted: 3 live, 1 done; 0 waiting") {
		t.Errorf("no final batches line:\n%s", text)
	}
	if !strings.Contains(text, "requests: 25 of 100 done: 20 succeeded, 5 failed") {
		t.Errorf("no refreshed requests line:\n%s", text)
	}
	if !strings.Contains(text, "ETA ") {
		t.Errorf("no ETA once requests ended:\n%s", text)
	}
	for _, l := range strings.Split(strings.ReplaceAll(text, "\r", "\n"), "\n") {
		if strings.HasPrefix(l, "requests:") || strings.HasPrefix(l, "batches:") || strings.HasPrefix(l, "[") {
			if len(l) > 69 {
				t.Errorf("progress line of %d columns on a 70-column terminal: %q", len(l), l)
			}
		}
	}
	// Each log line starts on a clean line: the area was erased first.
	for _, l := range strings.Split(raw, "\n") {
		i := strings.Index(l, "INF")
		if i < 0 {
			continue
		}
		pre := l[:i]
		if j := strings.LastIndex(pre, "\x1b[K"); j >= 0 {
			pre = pre[j:]
		}
		if strings.Contains(pre, "elapsed") || strings.Contains(pre, "batches:") || strings.Contains(pre, "requests:") {
			t.Errorf("a log line was written after the progress without erasing it: %q", l)
		}
	}
	store.mu.Lock()
	q := store.queries
	store.mu.Unlock()
	if q < 2 || q > 4 {
		t.Errorf("%d request-count queries; want the first and one per ended chunk (throttled)", q)
	}
	// After done() the screen ends with the erase and END.
	if !strings.HasSuffix(strings.TrimRight(text, "\r\n"), "END") {
		t.Errorf("something drawn after done(): %q", text[max(0, len(text)-200):])
	}
}

func TestNoProgressOffATerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p := newRunProgress(w, &fakeStore{}, &sluice.Job{ID: "j", Requests: 1})
	p.tick([]*sluice.Chunk{{ID: 1, State: sluice.ChunkSubmitted}})
	p.done()
	newPlanProgress(w).done()
	g := &globalFlags{logFormat: "auto", logLevel: "info"}
	log, _ := g.logger(w)
	log.Info().Msg("x")
	w.Close()
	b, _ := io.ReadAll(r)
	if string(b) == "" || b[0] != '{' || strings.Contains(string(b), "\x1b") {
		t.Errorf("off a terminal: %q, want only a JSON log line", b)
	}
}

func TestHumanFormats(t *testing.T) {
	for in, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -4500: "-4,500"} {
		if got := commas(in); got != want {
			t.Errorf("commas(%d) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[time.Duration]string{
		850 * time.Millisecond: "850ms", 42 * time.Second: "42s", 12*time.Minute + 30*time.Second: "12m30s",
		7*time.Hour + 5*time.Minute: "7h05m", 76 * time.Hour: "3d04h",
	} {
		if got := shortDuration(in); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", in, got, want)
		}
	}
	if b := bar(0.5, 22); b != "[##########----------]" {
		t.Errorf("bar(0.5, 22) = %q", b)
	}
}

// The progress lines count what they say (issue 11): live batches are a
// part of those submitted, 100% means every request is final, the ETA is
// not shorter than the running batches still need, and a run that starts
// by reconciling says so.
func TestProgressLinesAreTrue(t *testing.T) {
	now := time.Now()
	var chunks []*sluice.Chunk
	for i := range 14 {
		c := &sluice.Chunk{ID: int64(i + 1), Requests: 1000}
		switch {
		case i < 6: // ended: each took 10 minutes
			c.State, c.BatchID = sluice.ChunkDone, fmt.Sprint("b", i)
			c.SubmittedAt, c.EndedAt = now.Add(-20*time.Minute), now.Add(-10*time.Minute)
		case i < 8: // at the provider for a minute
			c.State, c.BatchID, c.SubmittedAt = sluice.ChunkSubmitted, fmt.Sprint("b", i), now.Add(-time.Minute)
		case i < 10: // creates in flight: no batch id yet
			c.State = sluice.ChunkCreating
		default:
			c.State = sluice.ChunkPending
		}
		chunks = append(chunks, c)
	}
	p := &runProgress{total: 20_000, start: now.Add(-time.Second), base: 0, midCall: 3}
	if got := p.linesLocked(120); len(got) != 1 || !strings.Contains(got[0], "reconciling: 3 chunks") {
		t.Errorf("before the first round: %q", got)
	}
	p.setChunks(chunks)
	p.reqs = map[sluice.RequestState]int64{sluice.RequestSucceeded: 19_929}
	lines := p.linesLocked(120)
	if !strings.HasPrefix(lines[0], "batches:  8 submitted: 2 live, 6 done; 4 waiting, 2 being sent or reconciled") {
		t.Errorf("batches line: %q", lines[0])
	}
	if strings.Contains(lines[2], "100%") || !strings.Contains(lines[2], " 99%") {
		t.Errorf("71 requests left shows as done: %q", lines[2])
	}
	if !strings.Contains(lines[2], "ETA 9m") {
		t.Errorf("the ETA ignores the 9 minutes the running batches still need: %q", lines[2])
	}
	if strings.Contains(lines[2], "[########################################]") {
		t.Errorf("full bar with requests left: %q", lines[2])
	}
}

func TestSizesAndPlurals(t *testing.T) {
	for in, want := range map[int64]string{
		9_999_999: "9.99 MB", 10_000_000: "10.00 MB", 999: "999 B", 1_999: "1.9 kB", 1_234_567_890: "1.23 GB", 200_000_000: "200.00 MB",
	} {
		if got := sizeString(in); got != want {
			t.Errorf("sizeString(%d) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[int64]string{0: "0 chunks", 1: "1 chunk", 2: "2 chunks", 1000: "1,000 chunks"} {
		if got := plural(in, "chunk", "chunks"); got != want {
			t.Errorf("plural(%d) = %q, want %q", in, got, want)
		}
	}
}
