package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/dispatcher"
	"github.com/sluice-batch/sluice/emulator"
)

// events is an ordered log of what a provider was asked to do.
type events struct {
	mu  sync.Mutex
	log []string
}

func (e *events) add(format string, a ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.log = append(e.log, fmt.Sprintf(format, a...))
}

func (e *events) index(ev string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Index(e.log, ev)
}

func (e *events) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return fmt.Sprint(e.log)
}

// slowCreate holds the create of one chunk until released, and logs the
// calls of the others.
type slowCreate struct {
	sluice.Provider
	slow    int64
	release chan struct{}
	held    chan struct{} // closed when the slow create has started
	ev      *events
}

func (p *slowCreate) Create(ctx context.Context, ref sluice.BatchRef, fileID string) (sluice.Batch, error) {
	if ref.Chunk == p.slow {
		close(p.held)
		select {
		case <-p.release:
		case <-ctx.Done():
			return sluice.Batch{}, ctx.Err()
		}
		defer p.ev.add("create %d returned", ref.Chunk)
	}
	return p.Provider.Create(ctx, ref, fileID)
}

func (p *slowCreate) Decode(ctx context.Context, ref sluice.BatchRef, files []string, lookup func(int) (string, bool), fn func(sluice.Result) error) error {
	err := p.Provider.Decode(ctx, ref, files, lookup, fn)
	p.ev.add("decoded %d", ref.Chunk)
	return err
}

// TestSlowCreateDoesNotDelayDownloads: while one chunk's create hangs at
// the provider, the other chunks' batches are polled, downloaded and
// recorded; nothing waits for the slow call (in rounds, every download
// waited for every create of its round).
func TestSlowCreateDoesNotDelayDownloads(t *testing.T) {
	t.Parallel()
	r := newRig(t, "openai", openAILines(30), sluice.Limits{MaxBatchRequests: 5}, 3, emulator.Options{})
	chunks, err := r.db.Chunks(context.Background(), r.job.ID)
	if err != nil || len(chunks) < 3 {
		t.Fatalf("planned %d chunks (%v), want several", len(chunks), err)
	}
	p := &slowCreate{Provider: r.prov, slow: chunks[0].ID, release: make(chan struct{}), held: make(chan struct{}), ev: &events{}}
	opts := r.options()
	opts.Concurrency = 3
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type result struct {
		out dispatcher.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := dispatcher.New(r.db, p, r.job, opts).Run(ctx, nil)
		done <- result{out, err}
	}()
	// Every other chunk ends while the slow create is held.
	<-p.held
	for {
		cs, err := r.db.Chunks(ctx, r.job.ID)
		if err != nil {
			t.Fatal(err)
		}
		ended := 0
		for _, c := range cs {
			if c.ID != p.slow && c.State.Terminal() {
				ended++
			}
		}
		if ended >= len(chunks)-1 {
			break
		}
		select {
		case res := <-done:
			t.Fatalf("run ended (%v, %v) before the other chunks did", res.out, res.err)
		case <-ctx.Done():
			t.Fatalf("the other chunks did not end while one create was held: %d of %d ended; events %s", ended, len(chunks)-1, p.ev)
		case <-time.After(5 * time.Millisecond):
		}
	}
	close(p.release)
	res := <-done
	if res.err != nil || res.out != dispatcher.Finished {
		t.Fatalf("run: %v %v", res.out, res.err)
	}
	slowAt := p.ev.index(fmt.Sprintf("create %d returned", p.slow))
	for _, c := range chunks[1:] {
		if i := p.ev.index(fmt.Sprintf("decoded %d", c.ID)); i < 0 || i > slowAt {
			t.Errorf("chunk %d decoded at event %d, the slow create returned at %d: %s", c.ID, i, slowAt, p.ev)
		}
	}
	checkNothingLost(t, r, 0)
}

// claimHook is an Options.Claim that refuses some chunks, counts claims
// and releases, and may play another worker on one chunk.
type claimHook struct {
	refuse   func(id int64) bool
	claims   atomic.Int32
	released atomic.Int32
	held     sync.Map // chunk id -> held now
	overlap  atomic.Bool
	// other, if set, runs once under the first claim of chunk otherID,
	// before the scheduler re-reads it: another worker moving the chunk.
	otherID int64
	other   func(c *sluice.Chunk)
	once    sync.Once
}

func (h *claimHook) claim(ctx context.Context, c *sluice.Chunk) (func(), bool, error) {
	if h.refuse(c.ID) {
		return nil, false, nil
	}
	if _, dup := h.held.LoadOrStore(c.ID, true); dup {
		h.overlap.Store(true)
	}
	h.claims.Add(1)
	if h.other != nil && c.ID == h.otherID {
		h.once.Do(func() { h.other(c) })
	}
	return func() { h.held.Delete(c.ID); h.released.Add(1) }, true, nil
}

// TestClaimHookRefusedChunksUntouched: chunks whose claim is refused (held
// by another worker) are never touched: no upload, no batch, no state
// change; the others run to the end under their claims, each claim
// released once its step is recorded, never two on one chunk at once.
func TestClaimHookRefusedChunksUntouched(t *testing.T) {
	t.Parallel()
	r := newRig(t, "openai", openAILines(30), sluice.Limits{MaxBatchRequests: 5}, 3, emulator.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	planned, err := r.db.Chunks(ctx, r.job.ID)
	if err != nil || len(planned) < 4 {
		t.Fatalf("planned %d chunks (%v), want several", len(planned), err)
	}
	refused := map[int64]bool{}
	for i, c := range planned {
		if i%2 == 1 {
			refused[c.ID] = true
		}
	}
	h := &claimHook{refuse: func(id int64) bool { return refused[id] }}
	opts := r.options()
	opts.Claim = h.claim
	stop := make(chan struct{})
	type result struct {
		out dispatcher.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := dispatcher.New(r.db, r.prov, r.job, opts).Run(ctx, stop)
		done <- result{out, err}
	}()
	for {
		cs, err := r.db.Chunks(ctx, r.job.ID)
		if err != nil {
			t.Fatal(err)
		}
		ended := 0
		for _, c := range cs {
			if !refused[c.ID] && c.State.Terminal() {
				ended++
			}
		}
		if ended == len(planned)-len(refused) {
			break
		}
		select {
		case res := <-done:
			t.Fatalf("run ended (%v, %v) before the claimed chunks did", res.out, res.err)
		case <-ctx.Done():
			t.Fatalf("claimed chunks did not end: %d of %d", ended, len(planned)-len(refused))
		case <-time.After(5 * time.Millisecond):
		}
	}
	close(stop)
	res := <-done
	if res.err != nil || res.out != dispatcher.Stopped {
		t.Fatalf("run: %v %v, want Stopped (refused chunks are left)", res.out, res.err)
	}
	cs, _ := r.db.Chunks(ctx, r.job.ID)
	byID := map[int64]*sluice.Chunk{}
	for _, c := range cs {
		byID[c.ID] = c
	}
	for _, p := range planned {
		c := byID[p.ID]
		if refused[p.ID] && (c.State != sluice.ChunkPending || c.FileID != "" || c.BatchID != "" || c.Polls != 0 || !c.IntentAt.IsZero()) {
			t.Errorf("refused chunk %d was touched: %s file %q batch %q polls %d", c.ID, c.State, c.FileID, c.BatchID, c.Polls)
		}
	}
	st := r.emu.Stats()
	if want := int64(len(planned) - len(refused)); st.BatchesCreated != want {
		t.Errorf("%d batches created, want %d (one per claimed chunk)", st.BatchesCreated, want)
	}
	if h.claims.Load() == 0 || h.claims.Load() != h.released.Load() {
		t.Errorf("%d claims, %d releases; want every claim released", h.claims.Load(), h.released.Load())
	}
	if h.overlap.Load() {
		t.Error("a chunk was claimed twice at once")
	}
}

// TestClaimActsOnTheStoredChunk: another worker uploads a chunk's file
// between this worker's last look and its claim; the scheduler re-reads
// the chunk under the claim and creates the batch from that file instead
// of uploading again (or failing on a stale state).
func TestClaimActsOnTheStoredChunk(t *testing.T) {
	t.Parallel()
	r := newRig(t, "openai", openAILines(12), sluice.Limits{MaxBatchRequests: 5}, 3, emulator.Options{})
	ctx := context.Background()
	planned, err := r.db.Chunks(ctx, r.job.ID)
	if err != nil || len(planned) < 2 {
		t.Fatalf("planned %d chunks (%v)", len(planned), err)
	}
	target := planned[0].ID
	var otherFile string
	h := &claimHook{refuse: func(int64) bool { return false }, otherID: target, other: func(seen *sluice.Chunk) {
		c := *seen
		c.State, c.IntentAt = sluice.ChunkUploading, time.Now()
		if err := r.db.UpdateChunk(ctx, &c, sluice.ChunkPending); err != nil {
			t.Errorf("other worker: %v", err)
			return
		}
		id, err := r.prov.Upload(ctx, c.Ref(r.job.Dir))
		if err != nil {
			t.Errorf("other worker: upload: %v", err)
			return
		}
		c.State, c.FileID, otherFile = sluice.ChunkUploaded, id, id
		if err := r.db.UpdateChunk(ctx, &c, sluice.ChunkUploading); err != nil {
			t.Errorf("other worker: %v", err)
		}
	}}
	opts := r.options()
	opts.Claim = h.claim
	r.run(opts)
	checkNothingLost(t, r, 0)
	cs, _ := r.db.Chunks(ctx, r.job.ID)
	for _, c := range cs {
		if c.ID == target && c.FileID != otherFile {
			t.Errorf("chunk %d has file %q, want the other worker's %q", c.ID, c.FileID, otherFile)
		}
	}
	if st := r.emu.Stats(); st.FilesUploaded != int64(len(planned)) {
		t.Errorf("%d files uploaded for %d chunks: the other worker's upload was redone", st.FilesUploaded, len(planned))
	}
}

// TestClaimErrorStopsTheRun: a lease store that fails stops the run
// (ErrFatal) without touching the chunk.
func TestClaimErrorStopsTheRun(t *testing.T) {
	t.Parallel()
	r := newRig(t, "openai", openAILines(6), sluice.Limits{MaxBatchRequests: 5}, 3, emulator.Options{})
	opts := r.options()
	boom := errors.New("lease table unreachable")
	opts.Claim = func(context.Context, *sluice.Chunk) (func(), bool, error) { return nil, false, boom }
	_, err := dispatcher.New(r.db, r.prov, r.job, opts).Run(context.Background(), nil)
	if !errors.Is(err, dispatcher.ErrFatal) || !errors.Is(err, boom) {
		t.Fatalf("run: %v, want a fatal claim error", err)
	}
	if st := r.emu.Stats(); st.FilesUploaded != 0 || st.BatchesCreated != 0 {
		t.Errorf("%d uploads, %d batches after the claim failed", st.FilesUploaded, st.BatchesCreated)
	}
}

// meetingDecodes holds each of the first n Decodes until n of them are
// running at once; a Decode that waits in vain is recorded as alone (and
// fails the test), never passed off as a meeting.
type meetingDecodes struct {
	sluice.Provider
	n       int32
	running atomic.Int32
	started atomic.Int32
	alone   atomic.Int32
	met     chan struct{}
	once    sync.Once
}

func (p *meetingDecodes) Decode(ctx context.Context, ref sluice.BatchRef, files []string, lookup func(int) (string, bool), fn func(sluice.Result) error) error {
	defer p.running.Add(-1)
	if p.running.Add(1) >= p.n {
		p.once.Do(func() { close(p.met) })
	}
	if p.started.Add(1) <= p.n {
		select {
		case <-p.met:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Second):
			p.alone.Add(1)
			return fmt.Errorf("chunk %d: decoded alone: no other chunk's results were decoded beside it", ref.Chunk)
		}
	}
	return p.Provider.Decode(ctx, ref, files, lookup, fn)
}

// TestResultsDecodedInParallel: the results of several ended batches are
// decoded and written at the same time, as many as the dispatcher's cap
// (max(2, GOMAXPROCS)) allows (only the tracker write is one at a time),
// and the job's outcome is the same as ever: every request once, in order,
// nothing bought twice. With decodes one at a time, the first Decode waits
// alone and the test fails (seen by setting the cap to 1).
func TestResultsDecodedInParallel(t *testing.T) {
	t.Parallel()
	r := newRig(t, "openai", openAILines(30), sluice.Limits{MaxBatchRequests: 5}, 3, emulator.Options{})
	p := &meetingDecodes{Provider: r.prov, n: 2, met: make(chan struct{})}
	r.prov = p
	opts := r.options()
	opts.Concurrency = 6
	r.run(opts)
	select {
	case <-p.met:
	default:
		t.Fatalf("never %d decodes at once", p.n)
	}
	if n := p.alone.Load(); n > 0 {
		t.Fatalf("%d decodes waited alone for another", n)
	}
	checkAllSucceeded(t, r, 0, 30, "")
}

// callLog logs creates and polls in the order they start.
type callLog struct {
	sluice.Provider
	ev *events
}

func (p *callLog) Create(ctx context.Context, ref sluice.BatchRef, fileID string) (sluice.Batch, error) {
	p.ev.add("create")
	return p.Provider.Create(ctx, ref, fileID)
}

func (p *callLog) Poll(ctx context.Context, ref sluice.BatchRef, batchID string) (sluice.Batch, error) {
	p.ev.add("poll")
	return p.Provider.Poll(ctx, ref, batchID)
}

// TestSubmissionsBeforePolls: with one slot, chunks waiting to be sent
// take it before polls that fell due meanwhile: every create starts before
// the first poll.
func TestSubmissionsBeforePolls(t *testing.T) {
	t.Parallel()
	r := newRig(t, "openai", openAILines(30), sluice.Limits{MaxBatchRequests: 5}, 3, emulator.Options{BatchTime: time.Hour})
	chunks, _ := r.db.Chunks(context.Background(), r.job.ID)
	p := &callLog{Provider: r.prov, ev: &events{}}
	opts := r.options()
	opts.Concurrency = 1
	opts.PollInterval, opts.MaxPollInterval = time.Millisecond, 5*time.Millisecond
	opts.OnTick = nil
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := dispatcher.New(r.db, p, r.job, opts).Run(context.Background(), stop)
		done <- err
	}()
	deadline := time.After(30 * time.Second)
	for p.ev.index("poll") < 0 {
		select {
		case <-deadline:
			t.Fatalf("no poll after 30s: %s", p.ev)
		case <-time.After(5 * time.Millisecond):
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	p.ev.mu.Lock()
	defer p.ev.mu.Unlock()
	creates := 0
	for _, e := range p.ev.log {
		if e == "poll" {
			break
		}
		creates++
	}
	if creates != len(chunks) {
		t.Errorf("%d creates before the first poll, want all %d: %v", creates, len(chunks), p.ev.log)
	}
}
