package main

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/splitter"
)

// planProgress rewrites one status line on a terminal while planning:
// bytes read, MB/s, lines. Off the terminal it prints nothing (logs say
// what happened).
type planProgress struct {
	mu   sync.Mutex
	out  *os.File
	on   bool
	last time.Time
	seen bool
}

func newPlanProgress(out *os.File) *planProgress {
	return &planProgress{out: out, on: isTerminal(out)}
}

func (p *planProgress) update(pr splitter.Progress) {
	if !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last = time.Now()
	p.seen = true
	rate := 0.0
	if s := pr.Elapsed.Seconds(); s > 0 {
		rate = float64(pr.BytesRead) / s / 1e6
	}
	pct := ""
	if pr.InputSize > 0 {
		pct = fmt.Sprintf(" (%.0f%%)", 100*float64(pr.BytesRead)/float64(pr.InputSize))
	}
	fmt.Fprintf(p.out, "\r\033[Kplanning: %s read%s, %.0f MB/s, %d lines", humanBytes(pr.BytesRead), pct, rate, pr.Lines)
}

func (p *planProgress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.on && p.seen {
		fmt.Fprint(p.out, "\r\033[K")
	}
}

// runProgress shows batches and requests while a job runs, on a terminal.
type runProgress struct {
	out     *os.File
	on      bool
	start   time.Time
	total   int64
	lastLen int
}

func newRunProgress(out *os.File, total int64) *runProgress {
	return &runProgress{out: out, on: isTerminal(out), start: time.Now(), total: total}
}

func (p *runProgress) tick(chunks []*sluice.Chunk) {
	if !p.on {
		return
	}
	var live, done, pending, retries int
	var doneReq int64
	for _, c := range chunks {
		switch {
		case c.State.Terminal():
			done++
		case c.State == sluice.ChunkPending:
			pending++
		default:
			live++
		}
		if c.Attempt > 1 {
			retries++
		}
		if c.State.Terminal() {
			doneReq += int64(c.Requests)
		}
	}
	eta := ""
	if el := time.Since(p.start); doneReq > 0 && doneReq < p.total && el > 5*time.Second {
		rem := time.Duration(float64(el) * float64(p.total-doneReq) / float64(doneReq))
		eta = ", ETA " + rem.Round(time.Second).String()
	}
	fmt.Fprintf(p.out, "\r\033[Kbatches: %d waiting, %d live, %d done (%d retry batches); requests through batches: %d/%d%s",
		pending, live, done, retries, doneReq, p.total, eta)
}

func (p *runProgress) done() {
	if p.on {
		fmt.Fprint(p.out, "\r\033[K")
	}
}
