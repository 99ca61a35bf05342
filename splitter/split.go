package splitter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-batch/sluice"
)

// Config is what Split needs.
type Config struct {
	// Input is the input file: plain, gzip or zstd, told by magic bytes.
	Input string
	// Open, when set, opens the input instead of the file Input names (an
	// object in a store, read as a stream: objstore), with its size and
	// modification time; Input then only names it in messages.
	Open func() (io.ReadCloser, sluice.Fingerprint, error)
	// Dir is the job directory; chunk files go to Dir/chunks.
	Dir string
	// Codec is the provider's wire format.
	Codec sluice.Codec
	// Limits are the per-batch limits to honour (zero: no limit).
	Limits sluice.Limits
	// Model is the job-level model for lines whose body has none.
	Model string
	// SkipInvalid writes bad lines to RejectsPath and goes on; otherwise
	// Split stops at the first bad line with a *LineError.
	SkipInvalid bool
	// RejectsPath is the rejects file (default Dir/rejects.jsonl).
	RejectsPath string
	// KeyScope, when set, makes every request's ledger key (its provider
	// and base URL: docs/money.md), recorded with the request so that later
	// jobs can reuse its answer.
	KeyScope string
	// Reuse answers requests from the ledger of earlier jobs' results
	// instead of putting them in chunks (needs KeyScope and a sink with
	// LookupReuse). Within the job, only the first request of a body is
	// answered so; repeats are bought.
	Reuse bool
	// legacy: the sink's ledger may hold answers under legacy keys
	// (bodykey.go), which are computed and looked up too.
	legacy bool
	// counts are the valid requests of each group (minimum.go), from a
	// first pass over the input when Limits.MinBatchRequests is set.
	counts map[groupKey]int
	// Progress, if set, is called at most ten times a second, and once at
	// the end, from the goroutine that writes chunks.
	Progress func(Progress)
}

// Progress is how far Split got.
type Progress struct {
	BytesRead    int64 // bytes of the input file read (compressed, if it is)
	InputSize    int64 // size of the input file
	Decompressed int64 // bytes of JSONL read (after decompression)
	Lines        int64 // lines handled, blank and rejected ones included
	Elapsed      time.Duration
}

// Result is a finished plan.
type Result struct {
	Fingerprint sluice.Fingerprint
	Lines       int64 // lines in the input, blank ones included
	Requests    int64 // valid requests, each in exactly one chunk
	Rejected    int64 // bad lines written to the rejects file (SkipInvalid)
	Bytes       int64 // wire bytes of all chunk files together
	Chunks      []sluice.Chunk
	// Reused requests were answered from earlier jobs (Config.Reuse), per
	// source job in ReuseSources, their records in ReusedFiles (relative
	// to the job dir). ReuseRefused counts ledger answers that could not be
	// read back (their source deleted or changed): those were bought.
	Reused       int64
	ReuseSources map[string]int64
	ReusedFiles  []string
	ReuseRefused int64
}

// LineError is a bad input line.
type LineError struct {
	File     string
	Line     int64  // 1-based
	CustomID string // "" when unknown
	Reason   string // see the table in the package doc
}

func (e *LineError) Error() string {
	if e.CustomID == "" {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Reason)
	}
	return fmt.Sprintf("%s:%d: custom_id %s: %s", e.File, e.Line, strconv.Quote(e.CustomID), e.Reason)
}

// ErrorCode: a bad line is bad input.
func (e *LineError) ErrorCode() sluice.ErrorCode { return sluice.CodeInvalid }

// ErrNoRequests is wrapped by the error of an input without a single valid
// request (empty, blank lines only, or every line rejected).
var ErrNoRequests error = &sluice.Error{Code: sluice.CodeInvalid, Err: errors.New("no requests")}

// ErrCorrupt is wrapped by the error of a compressed input whose stream
// is cut short or corrupt: bad input, not a failure of the machine.
var ErrCorrupt error = &sluice.Error{Code: sluice.CodeInvalid, Err: errors.New("corrupt input")}

// run is one Split call.
type run struct {
	ctx   context.Context
	cfg   Config
	sink  sluice.PlanSink
	in    *input
	start time.Time

	work    chan *block // to the workers
	ordered chan *block // to the writer, in input order
	free    chan *block
	blocks  int // blocks made so far (reader only)
	quit    chan struct{}

	decompressed atomic.Int64
}

// Split streams cfg.Input, validates every line, groups the requests by
// (url, model), writes chunk files under the limits and records every
// request and chunk in sink. See the package doc.
func Split(ctx context.Context, cfg Config, sink sluice.PlanSink) (*Result, error) {
	if cfg.Codec == nil {
		return nil, errors.New("splitter: no codec")
	}
	if cfg.Dir == "" {
		return nil, errors.New("splitter: no job directory")
	}
	if cfg.SkipInvalid && cfg.RejectsPath == "" {
		cfg.RejectsPath = filepath.Join(cfg.Dir, "rejects.jsonl")
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, chunksDir), 0o700); err != nil {
		return nil, err
	}
	defer limitMemory()()
	if cfg.Limits.MinBatchRequests > 1 && cfg.counts == nil {
		counts, err := countGroups(ctx, cfg)
		if err != nil {
			return nil, err
		}
		cfg.counts = counts
	}
	in, err := openInput(cfg.Input, cfg.Open)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	if ls, ok := sink.(LegacyKeySink); ok && cfg.Reuse && cfg.KeyScope != "" {
		cfg.legacy = ls.LegacyKeys()
	}
	sp := newRun(ctx, cfg, sink, in)
	wg := sp.startParsing()
	w, err := newWriter(sp)
	if err == nil {
		err = w.consume()
	}
	sp.stop(wg)
	if w != nil {
		w.cleanup()
	}
	if err != nil {
		return nil, err
	}
	res := w.result()
	if res.Fingerprint, err = in.finish(); err != nil {
		return nil, err
	}
	return res, nil
}

// newRun is one pass over in.
func newRun(ctx context.Context, cfg Config, sink sluice.PlanSink, in *input) *run {
	nblocks := 2*max(1, runtime.GOMAXPROCS(0)) + 4
	return &run{ctx: ctx, cfg: cfg, sink: sink, in: in, start: time.Now(),
		work: make(chan *block, nblocks), ordered: make(chan *block, nblocks),
		free: make(chan *block, nblocks), quit: make(chan struct{})}
}

// startParsing starts the reader and the parse workers; the WaitGroup
// says when they are done (after sp.quit is closed and sp.ordered
// drained).
func (sp *run) startParsing() *sync.WaitGroup {
	workers := max(1, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	wg.Add(1 + workers)
	go func() { defer wg.Done(); sp.reader() }()
	for range workers {
		go func() {
			defer wg.Done()
			p := newParser(&sp.cfg)
			for b := range sp.work {
				p.block(b)
				b.done <- struct{}{}
			}
		}()
	}
	return &wg
}

// stop ends a pass: the reader and workers are told to quit, what they
// still send is drained, and they are waited for.
func (sp *run) stop(wg *sync.WaitGroup) {
	close(sp.quit)
	go func() {
		for range sp.ordered {
		}
	}()
	wg.Wait()
}

// softMemoryLimit is the Go heap limit Split sets while it runs, unless
// the process has one (GOMEMLIMIT). Without it the collector lets the heap
// grow to twice the live data, and the custom_id filter of a file with
// millions of requests is tens of MB of live data; with it the collector
// runs more often instead, which costs little because that filter holds no
// pointers.
const softMemoryLimit = 96 << 20

var memLimit struct {
	sync.Mutex
	users int
	old   int64 // the limit to restore, or -1 when the process set its own
}

// limitMemory sets the soft memory limit and returns the func that puts
// the old one back (after the last concurrent Split).
func limitMemory() func() {
	memLimit.Lock()
	defer memLimit.Unlock()
	if memLimit.users == 0 {
		memLimit.old = -1
		if cur := debug.SetMemoryLimit(-1); cur == math.MaxInt64 {
			memLimit.old = cur
			debug.SetMemoryLimit(softMemoryLimit)
		}
	}
	memLimit.users++
	return func() {
		memLimit.Lock()
		defer memLimit.Unlock()
		if memLimit.users--; memLimit.users == 0 && memLimit.old != -1 {
			debug.SetMemoryLimit(memLimit.old)
		}
	}
}

// progress reports how far the run got, at most ten times a second unless
// final.
func (sp *run) progress(lines int64, last *time.Time, final bool) {
	if sp.cfg.Progress == nil {
		return
	}
	now := time.Now()
	if !final && now.Sub(*last) < 100*time.Millisecond {
		return
	}
	*last = now
	sp.cfg.Progress(Progress{BytesRead: sp.in.raw.Load(), InputSize: sp.in.fp.Size,
		Decompressed: sp.decompressed.Load(), Lines: lines, Elapsed: now.Sub(sp.start)})
}
