package dispatcher_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/dispatcher"
	"github.com/sluice-batch/sluice/emulator"
)

// refusingUploads answers the upload of one chunk with 401 once every
// other upload of the round is in flight, and lets those others reach the
// provider only after the 401 has been returned to the dispatcher.
type refusingUploads struct {
	sluice.Provider
	refuse   int64 // the chunk whose upload gets 401
	siblings int   // uploads that must be in flight before the 401
	inFlight sync.WaitGroup
	refused  chan struct{}
	uploads  atomic.Int32
	halted   func() bool // the dispatcher has seen the 401
}

// waitHalted returns once halted reports true (the dispatcher recorded the
// fatal error), or after 10 s, a failure the test's assertions report.
func waitHalted(halted func() bool) {
	deadline := time.Now().Add(10 * time.Second)
	for !halted() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

func (p *refusingUploads) Upload(ctx context.Context, ref sluice.BatchRef) (string, error) {
	if ref.Chunk == p.refuse {
		p.inFlight.Wait()
		defer close(p.refused)
		return "", &sluice.APIError{Status: 401, Code: "invalid_api_key", Message: "Incorrect API key provided"}
	}
	p.uploads.Add(1)
	p.inFlight.Done()
	<-p.refused
	waitHalted(p.halted)
	return p.Provider.Upload(ctx, ref)
}

// TestFatalErrorLetsSiblingsFinish: a 401 on one upload stops the run with
// a fatal error, but the uploads in flight beside it complete and are
// recorded; no chunk is left in an intent state for the next run to wait
// out the reconcile grace on (issue 11, item 6).
func TestFatalErrorLetsSiblingsFinish(t *testing.T) {
	t.Parallel()
	r := newRig(t, "openai", openAILines(24), sluice.Limits{MaxBatchRequests: 6}, 3, emulator.Options{})
	chunks, err := r.db.Chunks(context.Background(), r.job.ID)
	if err != nil || len(chunks) < 3 {
		t.Fatalf("planned %d chunks (%v), want several", len(chunks), err)
	}
	p := &refusingUploads{Provider: r.prov, refuse: chunks[0].ID, siblings: len(chunks) - 1, refused: make(chan struct{})}
	p.inFlight.Add(p.siblings)
	opts := r.options()
	opts.Concurrency = len(chunks)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := dispatcher.New(r.db, p, r.job, opts)
	p.halted = func() bool { return dispatcher.Halted(d) }
	_, err = d.Run(ctx, nil)
	if !errors.Is(err, dispatcher.ErrFatal) {
		t.Fatalf("run: %v, want a fatal error", err)
	}
	if p.uploads.Load() != int32(p.siblings) {
		t.Fatalf("%d sibling uploads, want %d", p.uploads.Load(), p.siblings)
	}
	chunks, err = r.db.Chunks(context.Background(), r.job.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chunks {
		switch {
		case c.State == sluice.ChunkUploading || c.State == sluice.ChunkCreating:
			t.Errorf("chunk %d left in intent state %s after the fatal error", c.ID, c.State)
		case c.ID == p.refuse && c.State != sluice.ChunkPending:
			t.Errorf("refused chunk %d is %s, want pending", c.ID, c.State)
		case c.ID != p.refuse && (c.State != sluice.ChunkUploaded || c.FileID == ""):
			t.Errorf("sibling chunk %d is %s (file %q), want uploaded with its file recorded", c.ID, c.State, c.FileID)
		}
	}
	if n := r.emu.Stats().BatchesCreated; n != 0 {
		t.Errorf("%d batches created after the fatal error, want none (no new call starts)", n)
	}
}

// refusingPoll answers the first poll of one chunk with 401 once every
// other chunk's create is in flight, and lets those creates reach the
// provider only after the 401 has been returned to the dispatcher.
type refusingPoll struct {
	sluice.Provider
	refuse   int64
	inFlight sync.WaitGroup
	refused  chan struct{}
	once     sync.Once
	creates  atomic.Int32
	halted   func() bool // the dispatcher has seen the 401
}

func (p *refusingPoll) Create(ctx context.Context, ref sluice.BatchRef, fileID string) (sluice.Batch, error) {
	if ref.Chunk != p.refuse {
		p.inFlight.Done()
		<-p.refused
		waitHalted(p.halted)
	}
	p.creates.Add(1)
	return p.Provider.Create(ctx, ref, fileID)
}

func (p *refusingPoll) Poll(ctx context.Context, ref sluice.BatchRef, batchID string) (sluice.Batch, error) {
	if ref.Chunk == p.refuse {
		p.inFlight.Wait()
		defer p.once.Do(func() { close(p.refused) })
		return sluice.Batch{}, &sluice.APIError{Status: 401, Code: "invalid_api_key", Message: "Incorrect API key provided"}
	}
	return p.Provider.Poll(ctx, ref, batchID)
}

// TestFatalPollLetsSiblingCreatesFinish: a 401 on one chunk's poll, while
// the other chunks' creates are mid-call, stops the run; those creates
// complete and are recorded as submitted batches, and no chunk is left in
// an intent state (uploading, creating) for the next run to reconcile.
func TestFatalPollLetsSiblingCreatesFinish(t *testing.T) {
	t.Parallel()
	r := newRig(t, "openai", openAILines(24), sluice.Limits{MaxBatchRequests: 6}, 3, emulator.Options{BatchTime: time.Hour})
	chunks, err := r.db.Chunks(context.Background(), r.job.ID)
	if err != nil || len(chunks) < 3 {
		t.Fatalf("planned %d chunks (%v), want several", len(chunks), err)
	}
	p := &refusingPoll{Provider: r.prov, refuse: chunks[0].ID, refused: make(chan struct{})}
	p.inFlight.Add(len(chunks) - 1)
	opts := r.options()
	opts.Concurrency = len(chunks)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := dispatcher.New(r.db, p, r.job, opts)
	p.halted = func() bool { return dispatcher.Halted(d) }
	_, err = d.Run(ctx, nil)
	if !errors.Is(err, dispatcher.ErrFatal) || ctx.Err() != nil {
		t.Fatalf("run: %v (ctx %v), want a fatal error", err, ctx.Err())
	}
	chunks, err = r.db.Chunks(context.Background(), r.job.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chunks {
		if c.State != sluice.ChunkSubmitted || c.BatchID == "" {
			t.Errorf("chunk %d is %s (batch %q), want submitted with its batch recorded", c.ID, c.State, c.BatchID)
		}
	}
	if n := r.emu.Stats().BatchesCreated; n != int64(len(chunks)) {
		t.Errorf("%d batches created, want %d (each create in flight completes, no other starts)", n, len(chunks))
	}
}
