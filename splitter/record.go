package splitter

import (
	"fmt"
	"os"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/atomicfile"
)

// recorder feeds the plan sink from a goroutine of its own, so SQLite works
// while the writer goes on with the next lines: request rows arrive in
// batches as the writer puts requests into chunks (a chunk's id is given
// when it opens), and chunk rows when their chunks close. Closed chunk
// files are fsynced, closed and renamed by a few goroutines beside it, so
// neither the writer nor the sink waits for the disk; close waits for all.
// sync waits until everything handed over is recorded, which the writer
// does before asking the sink about a custom_id.
type recorder struct {
	sink   sluice.PlanSink
	in     chan recJob
	free   chan []sluice.Request // emptied row batches, for reuse
	done   chan struct{}
	files  errgroup.Group // fsync, close, rename of closed chunk files
	err    error          // the sink's first error; read by others only after sync or done
	stop   atomic.Bool    // set when the run failed: record nothing more
	failed atomic.Bool    // err is set
	// filesFailed is set when a chunk file could not be synced, closed or
	// renamed (files.Wait returns the error).
	filesFailed atomic.Bool
}

// recJob is one thing for the recorder: a batch of rows, a chunk, or (with
// neither) a sync.
type recJob struct {
	rows []sluice.Request
	c    *sluice.Chunk
	ack  chan struct{}
}

const (
	// recordBatch is how many request rows go to the sink per call (a
	// multi-row INSERT is much cheaper per row than one per row).
	recordBatch = 512
	// recordQueue is how many batches may wait for the sink: memory stays
	// bounded, and a slow sink holds the writer back.
	recordQueue = 16
	// chunkSyncs is how many chunk files may be fsynced at once.
	chunkSyncs = 4
)

func newRecorder(sink sluice.PlanSink) *recorder {
	r := &recorder{sink: sink, in: make(chan recJob, recordQueue), free: make(chan []sluice.Request, recordQueue+2),
		done: make(chan struct{})}
	r.files.SetLimit(chunkSyncs)
	go r.loop()
	return r
}

func (r *recorder) loop() {
	defer close(r.done)
	for j := range r.in {
		switch {
		case j.ack != nil:
			j.ack <- struct{}{}
		case r.err != nil || r.stop.Load():
		case j.c != nil:
			cc := *j.c // the sink may fill fields of its copy
			r.err = r.sink.AddChunk(&cc)
		default:
			r.err = r.record(j.rows)
		}
		if j.rows != nil {
			select {
			case r.free <- j.rows[:0]:
			default:
			}
		}
		if r.err != nil {
			r.failed.Store(true)
		}
	}
}

// BatchSink is an optional interface of a plan sink that records many
// requests in one call. The recorder uses it when the sink has it.
type BatchSink interface {
	AddRequests(rs []sluice.Request) error
}

func (r *recorder) record(rows []sluice.Request) error {
	if bs, ok := r.sink.(BatchSink); ok {
		return bs.AddRequests(rows)
	}
	for i := range rows {
		if err := r.sink.AddRequest(&rows[i]); err != nil {
			return err
		}
	}
	return nil
}

// batch returns an empty slice for the next batch of rows.
func (r *recorder) batch() []sluice.Request {
	select {
	case b := <-r.free:
		return b
	default:
		return make([]sluice.Request, 0, recordBatch)
	}
}

// addRows hands a batch of rows over; it belongs to the recorder now. It
// returns the first failure so far, if there is one, so that a failing
// sink or disk stops the run at once.
func (r *recorder) addRows(rows []sluice.Request) error {
	if err := r.failure(); err != nil {
		return err
	}
	r.in <- recJob{rows: rows}
	return nil
}

// failure returns the sink's or the chunk files' first error, if either
// failed.
func (r *recorder) failure() error {
	switch {
	case r.failed.Load():
		return r.sync()
	case r.filesFailed.Load():
		return r.files.Wait()
	}
	return nil
}

// addChunk hands a closed chunk over with its file (flushed, still open
// under the name tmp): the file is synced, closed and renamed to final in
// the background, and the chunk recorded (possibly before its file is
// synced: close waits for every file). It returns the first failure so
// far, if there is one.
func (r *recorder) addChunk(c *sluice.Chunk, f *os.File, tmp, final string) error {
	if err := r.failure(); err != nil {
		f.Close()
		return err
	}
	r.files.Go(func() error {
		if r.stop.Load() {
			f.Close()
			return nil
		}
		err := atomicfile.Commit(f, final)
		if err != nil {
			r.filesFailed.Store(true)
			err = fmt.Errorf("chunk %s: %w", tmp, err)
		}
		return err
	})
	r.in <- recJob{c: c}
	return nil
}

// sync waits until everything handed over is recorded and returns the
// sink's first error.
func (r *recorder) sync() error {
	ack := make(chan struct{})
	r.in <- recJob{ack: ack}
	<-ack
	if r.err != nil {
		return fmt.Errorf("record plan: %w", r.err)
	}
	return nil
}

// close stops the recorder once everything handed over is recorded and
// every chunk file is synced under its final name.
func (r *recorder) close() error {
	close(r.in)
	<-r.done
	ferr := r.files.Wait()
	if r.err != nil {
		return fmt.Errorf("record plan: %w", r.err)
	}
	return ferr
}
