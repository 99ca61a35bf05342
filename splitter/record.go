package splitter

import (
	"fmt"
	"os"
	"sync/atomic"

	"github.com/sluice-batch/sluice"
)

// recorder finishes closed chunks and feeds the plan sink from a goroutine
// of its own, so fsync and SQLite work while the writer goes on with the
// next chunks. It takes closed chunks in order (ids are given in order of
// closing) with their file and pending rows: it fsyncs, closes and renames
// the file, then records the chunk and its rows. sync waits until
// everything handed over is done, which the writer does before asking the
// sink about a custom_id.
type recorder struct {
	sink   sluice.PlanSink
	env    sluice.Envelope
	in     chan recJob
	done   chan struct{}
	err    error       // the sink's first error; read by others only after sync or done
	stop   atomic.Bool // set when the run failed: record nothing more
	failed atomic.Bool // err is set
}

type recJob struct {
	c          *sluice.Chunk // nil for a sync
	p          *pending
	f          *os.File // the chunk file, flushed, still open
	tmp, final string   // its name now and its name once synced
	ack        chan struct{}
}

func newRecorder(sink sluice.PlanSink, env sluice.Envelope) *recorder {
	r := &recorder{sink: sink, env: env, in: make(chan recJob, 1), done: make(chan struct{})}
	go r.loop()
	return r
}

func (r *recorder) loop() {
	defer close(r.done)
	for j := range r.in {
		switch {
		case j.c == nil:
			j.ack <- struct{}{}
		case r.err == nil && !r.stop.Load():
			r.err = r.finish(j)
			j.p.reset()
		default:
			j.f.Close()
			j.p.reset()
		}
		if r.err != nil {
			r.failed.Store(true)
		}
	}
}

// finish syncs, closes and renames a chunk file, then records it.
func (r *recorder) finish(j recJob) error {
	if err := j.f.Sync(); err != nil {
		j.f.Close()
		return fmt.Errorf("sync chunk: %w", err)
	}
	if err := j.f.Close(); err != nil {
		return fmt.Errorf("close chunk: %w", err)
	}
	if err := os.Rename(j.tmp, j.final); err != nil {
		return err
	}
	return r.record(j.c, j.p)
}

// BatchSink is an optional interface of a plan sink that records many
// requests in one call (a multi-row INSERT is much cheaper per row than one
// statement per row). The recorder uses it when the sink has it, with up
// to recordBatch requests per call, in chunk order.
type BatchSink interface {
	AddRequests(rs []sluice.Request) error
}

const recordBatch = 512

// record adds a chunk and then its requests, in their order in the chunk.
func (r *recorder) record(c *sluice.Chunk, p *pending) error {
	cc := *c // the sink may fill fields of its copy
	if err := r.sink.AddChunk(&cc); err != nil {
		return err
	}
	bs, batched := r.sink.(BatchSink)
	var batch []sluice.Request
	off := int64(len(r.env.Header))
	err := p.each(func(i int, row *row) error {
		if i > 0 {
			off += int64(len(r.env.Sep))
		}
		req := sluice.Request{Ordinal: row.ordinal, Line: row.line, CustomID: string(row.customID), Chunk: c.ID,
			Index: i, Offset: off, Length: row.length, Tokens: row.tokens, Attempt: 1, State: sluice.RequestPending}
		off += int64(row.length)
		if !batched {
			return r.sink.AddRequest(&req)
		}
		if batch = append(batch, req); len(batch) == recordBatch {
			err := bs.AddRequests(batch)
			batch = batch[:0]
			return err
		}
		return nil
	})
	if err == nil && len(batch) > 0 {
		err = bs.AddRequests(batch)
	}
	return err
}

// add hands a closed chunk over; its file and rows now belong to the
// recorder. It returns the recorder's error, if it failed before.
func (r *recorder) add(j recJob) error {
	if r.failed.Load() {
		j.f.Close()
		j.p.reset()
		return r.sync()
	}
	r.in <- j
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

// close stops the recorder once everything handed over is recorded.
func (r *recorder) close() error {
	close(r.in)
	<-r.done
	if r.err != nil {
		return fmt.Errorf("record plan: %w", r.err)
	}
	return nil
}
