package main

// Terminal progress. On a terminal, the last few lines of stderr are a live
// area redrawn in place (planning: bytes, MB/s, lines; running: batches,
// requests, ETA); log lines written through the same area scroll above it,
// so the two never garble each other. Off a terminal there is no area at
// all: the zerolog JSON lines are the record.
//
// Hand-written rather than a progress-bar library: the display is several
// counters with one bar, it has to share stderr with the console logger
// (every log line clears the area, is written, and the area is drawn again
// under one lock), and it must stay inert without a terminal. That is about
// a hundred lines of ANSI erase-line/cursor-up, with no dependency whose
// own renderer would fight the logger for the cursor.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/splitter"
)

// liveArea is the bottom of a terminal that progress redraws in place.
// Writes through it (log lines) appear above the area.
type liveArea struct {
	mu    sync.Mutex
	f     *os.File
	lines []string
	shown int // lines currently drawn; the cursor ends the last one
}

var (
	areasMu sync.Mutex
	areas   = map[*os.File]*liveArea{}
)

// terminalArea returns the live area of f when f is a terminal, else nil.
// Every caller gets the same area for the same file.
func terminalArea(f *os.File) *liveArea {
	if f == nil || !isTerminal(f) {
		return nil
	}
	areasMu.Lock()
	defer areasMu.Unlock()
	a := areas[f]
	if a == nil {
		a = &liveArea{f: f}
		areas[f] = a
	}
	return a
}

// Write writes p above the area (the console logger writes here).
func (a *liveArea) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.shown == 0 {
		return a.f.Write(p)
	}
	var b bytes.Buffer
	a.erase(&b)
	b.Write(p)
	if len(p) > 0 && p[len(p)-1] != '\n' {
		b.WriteByte('\n')
	}
	a.draw(&b)
	if _, err := a.f.Write(b.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// set replaces the area's lines.
func (a *liveArea) set(lines []string) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var b bytes.Buffer
	a.erase(&b)
	a.lines = lines
	a.draw(&b)
	a.f.Write(b.Bytes())
}

// clear removes the area from the screen: no lines.
func (a *liveArea) clear() { a.set(nil) }

func (a *liveArea) erase(b *bytes.Buffer) {
	if a.shown == 0 {
		return
	}
	b.WriteString("\r\033[K")
	for i := 1; i < a.shown; i++ {
		b.WriteString("\033[1A\033[K")
	}
	a.shown = 0
}

// draw writes the lines, each cut to the terminal's width so none wraps
// (a wrapped line would leave a stale row behind on the next erase).
func (a *liveArea) draw(b *bytes.Buffer) {
	width := a.width()
	for i, l := range a.lines {
		if i > 0 {
			b.WriteByte('\n')
		}
		if len(l) > width-1 {
			l = l[:width-1]
		}
		b.WriteString(l)
	}
	a.shown = len(a.lines)
}

func (a *liveArea) width() int {
	if w, _, err := term.GetSize(int(a.f.Fd())); err == nil && w > 0 {
		return w
	}
	return 80
}

// planProgress shows how far planning got: bytes read, MB/s, lines.
type planProgress struct {
	area *liveArea
	mu   sync.Mutex
	last time.Time
}

func newPlanProgress(out *os.File) *planProgress {
	return &planProgress{area: terminalArea(out)}
}

func (p *planProgress) update(pr splitter.Progress) {
	if p.area == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last = time.Now()
	p.area.set(planLines(pr, p.area.width()))
}

func planLines(pr splitter.Progress, width int) []string {
	rate := 0.0
	if s := pr.Elapsed.Seconds(); s > 0 {
		rate = float64(pr.BytesRead) / s
	}
	of := ""
	if pr.InputSize > 0 {
		of = " of " + sizeString(pr.InputSize)
	}
	first := fmt.Sprintf("planning: %s%s read, %s/s, %s lines", sizeString(pr.BytesRead), of, sizeString(int64(rate)), commas(pr.Lines))
	if pr.InputSize <= 0 {
		return []string{first}
	}
	frac := float64(pr.BytesRead) / float64(pr.InputSize)
	tail := fmt.Sprintf(" %3.0f%%  %s elapsed", 100*frac, shortDuration(pr.Elapsed))
	if rate > 0 && pr.BytesRead < pr.InputSize && pr.Elapsed > time.Second {
		tail += ", ETA " + shortDuration(time.Duration(float64(pr.InputSize-pr.BytesRead)/rate*float64(time.Second)))
	}
	return []string{first, bar(frac, width-len(tail)-1) + tail}
}

func (p *planProgress) done() { p.area.clear() }

// progressStore is the tracker's view the run progress needs.
type progressStore interface {
	Chunks(ctx context.Context, job string) ([]*sluice.Chunk, error)
	RequestStates(ctx context.Context, job string) (map[sluice.RequestState]int64, error)
}

// runProgress shows a running job: batches submitted, live, done, waiting;
// requests succeeded, failed and retried; a bar and an ETA from the
// throughput observed in this run. The dispatcher hands it the chunks
// whenever a step ends (tick); since a step can take long (an upload of a
// 200 MB file), the chunks are also read from the tracker every second. Request counts come from the tracker too, queried again only when
// a chunk has ended since the last query (requests change state only then)
// and never more often than once a second, or ten times the last query's
// duration on huge jobs.
type runProgress struct {
	area  *liveArea
	db    progressStore
	job   string
	total int64
	start time.Time

	mu        sync.Mutex
	chunks    chunkCounts
	ticked    bool
	ended     int // terminal chunks at the last tick
	queried   int // terminal chunks at the last query (-1: never)
	reqs      map[sluice.RequestState]int64
	base      int64 // final requests when this run started (-1: unknown)
	lastQuery time.Time
	queryDur  time.Duration
	// now is the throttle's clock (time.Now; a test's clock moves it on).
	now func() time.Time
	// midCall is the chunks a previous run left mid-call when this one
	// started: the dispatcher reconciles them before its first round.
	midCall int

	wake   chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// chunkCounts summarises chunks for the display.
type chunkCounts struct {
	submitted, live, done, failed, waiting int
	retryBatches                           int
	retried                                int64 // requests sent again in retry batches

	// For the progress line: running is the batches at the provider not
	// ended (a subset of submitted, unlike live, which counts creates in
	// flight); midCall the chunks in an upload or create (in flight, or
	// left by a killed run and being reconciled); queued the rest of
	// waiting.
	running, midCall, queued int
	// remaining is how long the running batches should still take, from
	// how long the batches that ended took (0: unknown).
	remaining time.Duration
}

func countChunks(chunks []*sluice.Chunk) chunkCounts {
	var n chunkCounts
	var took time.Duration
	var ended int
	now := time.Now()
	for _, c := range chunks {
		if c.BatchID != "" {
			n.submitted++
		}
		switch c.State {
		case sluice.ChunkSubmitted:
			n.running++
		case sluice.ChunkUploading, sluice.ChunkCreating:
			n.midCall++
		case sluice.ChunkPending, sluice.ChunkUploaded:
			n.queued++
		}
		if c.State.Terminal() && !c.SubmittedAt.IsZero() && c.EndedAt.After(c.SubmittedAt) {
			took += c.EndedAt.Sub(c.SubmittedAt)
			ended++
		}
	}
	if ended > 0 {
		mean := took / time.Duration(ended)
		for _, c := range chunks {
			if c.State == sluice.ChunkSubmitted && !c.SubmittedAt.IsZero() {
				n.remaining = max(n.remaining, mean-now.Sub(c.SubmittedAt))
			}
		}
	}
	for _, c := range chunks {
		switch {
		case c.State == sluice.ChunkDone:
			n.done++
		case c.State == sluice.ChunkFailed && c.BatchID == "" && c.ErrorCode == sluice.CodeQueueFull:
			// Re-cut before it was submitted (dispatcher/split.go): no
			// batch, its requests in its pieces.
		case c.State == sluice.ChunkFailed:
			n.failed++
		case c.State.Live():
			n.live++
		default:
			n.waiting++
		}
		if c.Attempt-c.Splits > 1 { // a split spends no attempt
			n.retryBatches++
			n.retried += int64(c.Requests)
		}
	}
	return n
}

func newRunProgress(out *os.File, db progressStore, job *sluice.Job) *runProgress {
	return newRunProgressClock(out, db, job, time.Now)
}

// newRunProgressClock is newRunProgress with the query throttle's clock.
func newRunProgressClock(out *os.File, db progressStore, job *sluice.Job, now func() time.Time) *runProgress {
	p := &runProgress{area: terminalArea(out), db: db, job: job.ID, total: job.Requests, start: time.Now(),
		queried: -1, base: -1, wake: make(chan struct{}, 1), now: now}
	if p.area == nil {
		return p
	}
	if chunks, err := db.Chunks(context.Background(), job.ID); err == nil {
		p.midCall = countChunks(chunks).midCall
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.wg.Add(1)
	go p.loop(ctx)
	return p
}

// tick is the dispatcher's OnTick: it must not block.
func (p *runProgress) tick(chunks []*sluice.Chunk) {
	if p.area == nil {
		return
	}
	p.setChunks(chunks)
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *runProgress) setChunks(chunks []*sluice.Chunk) {
	n := countChunks(chunks)
	p.mu.Lock()
	p.chunks, p.ticked, p.ended = n, true, n.done+n.failed
	p.mu.Unlock()
}

func (p *runProgress) loop(ctx context.Context) {
	defer p.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	reload := false
	for {
		p.mu.Lock()
		ticked := p.ticked
		p.mu.Unlock()
		// The first chunks come from the dispatcher (it may reconcile first);
		// then a tick brings fresh ones, and the timer reads them.
		if ticked && reload {
			if chunks, err := p.db.Chunks(ctx, p.job); err == nil {
				p.setChunks(chunks)
			}
		}
		p.refresh(ctx)
		if ctx.Err() != nil {
			return
		}
		p.mu.Lock()
		lines := p.linesLocked(p.area.width())
		p.mu.Unlock()
		if lines != nil && ctx.Err() == nil {
			p.area.set(lines)
		}
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
			reload = false
		case <-t.C:
			reload = true
		}
	}
}

// refresh queries the request counts when a chunk ended since the last
// query and the throttle allows.
func (p *runProgress) refresh(ctx context.Context) {
	p.mu.Lock()
	ended, queried := p.ended, p.queried
	wait := max(time.Second, 10*p.queryDur)
	due := queried < 0 || (ended != queried && p.now().Sub(p.lastQuery) >= wait)
	p.mu.Unlock()
	if !due {
		return
	}
	t0 := p.now()
	m, err := p.db.RequestStates(ctx, p.job)
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reqs, p.queried, p.lastQuery, p.queryDur = m, ended, t0, p.now().Sub(t0)
	if p.base < 0 {
		p.base = m[sluice.RequestSucceeded] + m[sluice.RequestFailed]
	}
}

func (p *runProgress) linesLocked(width int) []string {
	if !p.ticked {
		if p.midCall > 0 {
			// The dispatcher's first step: it can take a while.
			return []string{fmt.Sprintf("reconciling: %s a previous run left mid-call, against the provider's listings (%s elapsed)",
				plural(int64(p.midCall), "chunk", "chunks"), shortDuration(time.Since(p.start)))}
		}
		return nil // nothing to show before the dispatcher's first round
	}
	n := p.chunks
	l1 := fmt.Sprintf("batches:  %s submitted: %s live, %s done", commas(int64(n.submitted)), commas(int64(n.running)), commas(int64(n.done)))
	if n.failed > 0 {
		l1 += fmt.Sprintf(", %s failed", commas(int64(n.failed)))
	}
	l1 += fmt.Sprintf("; %s waiting", commas(int64(n.queued)))
	if n.midCall > 0 {
		l1 += fmt.Sprintf(", %s being sent or reconciled", commas(int64(n.midCall)))
	}
	if n.retryBatches > 0 {
		l1 += fmt.Sprintf(" (%s)", plural(int64(n.retryBatches), "retry batch", "retry batches"))
	}
	succ, fail := p.reqs[sluice.RequestSucceeded], p.reqs[sluice.RequestFailed]
	final := succ + fail
	l2 := fmt.Sprintf("requests: %s of %s done: %s succeeded, %s failed, %s retried",
		commas(final), commas(p.total), commas(succ), commas(fail), commas(n.retried))
	el := time.Since(p.start)
	tail := fmt.Sprintf(" %3d%%  %s elapsed", percent(final, p.total), shortDuration(el))
	if gained := final - p.base; p.base >= 0 && gained > 0 && final < p.total {
		// Throughput alone says "36ms" when batches ended in a lump; the
		// batches still running take about as long as those that ended.
		eta := time.Duration(float64(el) * float64(p.total-final) / float64(gained))
		eta = max(eta, n.remaining)
		tail += ", ETA " + shortDuration(eta)
	} else if final < p.total {
		tail += ", ETA after the first batch ends"
	}
	return []string{l1, l2, bar(frac(final, p.total), width-len(tail)-1) + tail}
}

func (p *runProgress) done() {
	if p.area == nil {
		return
	}
	p.cancel()
	p.wg.Wait()
	p.area.clear()
}

// percent is a of b in whole percent, rounded down: 100 only when all
// are done (71 requests left of 20,000 is 99%, not 100%).
func percent(a, b int64) int {
	if b <= 0 || a >= b {
		return 100
	}
	return int(100 * a / b)
}

func frac(a, b int64) float64 {
	if b <= 0 {
		return 1
	}
	return min(1, float64(a)/float64(b))
}

// bar draws [#####-----] in about width columns (10 to 40).
func bar(f float64, width int) string {
	w := min(max(width-2, 10), 40)
	n := int(f * float64(w)) // full only when all is done
	n = min(max(n, 0), w)
	return "[" + strings.Repeat("#", n) + strings.Repeat("-", w-n) + "]"
}

// sizeString is a byte count for people: 0 B, 12.3 kB, 4.56 MB, 1.23 GB.
// Digits are cut, never rounded up: 9,999,999 bytes is 9.99 MB, not 10.00
// MB, so a size under a limit never reads as over it.
func sizeString(n int64) string {
	cut := func(unit int64, decimals int, name string) string {
		scale := int64(1)
		for range decimals {
			scale *= 10
		}
		return fmt.Sprintf("%d.%0*d %s", n/unit, decimals, n%unit/(unit/scale), name)
	}
	switch {
	case n >= 1e9:
		return cut(1e9, 2, "GB")
	case n >= 1e6:
		return cut(1e6, 2, "MB")
	case n >= 1e3:
		return cut(1e3, 1, "kB")
	}
	return fmt.Sprintf("%d B", max(n, 0))
}

// commas writes 1234567 as 1,234,567.
func commas(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// shortDuration rounds for display: 850ms, 42s, 12m30s, 7h05m, 3d04h.
func shortDuration(d time.Duration) string {
	switch {
	case d < 0:
		d = 0
		fallthrough
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	d = d.Round(time.Hour)
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}
