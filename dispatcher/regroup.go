package dispatcher

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/zeebo/xxh3"

	"github.com/sluice-batch/sluice"
)

// recut says how regroup cuts: the attempt of the new chunks, and at most
// how many estimated input tokens and requests each may hold (0: the
// job's limits alone).
type recut struct {
	attempt  int
	tokens   int64
	requests int  // at most this many requests each (0: the job's limits alone)
	split    bool // a split (split.go): spends no attempt; files named -s
	combine  bool // retries of several chunks combined (combine.go): files named -m
}

// limits is lim with k's further bounds.
func (k recut) limits(lim sluice.Limits) sluice.Limits {
	if k.tokens > 0 && (lim.MaxBatchTokens <= 0 || k.tokens < lim.MaxBatchTokens) {
		lim.MaxBatchTokens = k.tokens
	}
	if k.requests > 0 && (lim.MaxBatchRequests <= 0 || k.requests < lim.MaxBatchRequests) {
		lim.MaxBatchRequests = k.requests
	}
	return lim
}

// cutSource is a chunk whose requests (reqs[idx]) a cut copies.
type cutSource struct {
	chunk *sluice.Chunk // its file is checked against its FileDigest before a byte of it is copied
	reqs  []sluice.Request
	idx   []int
}

// retryCut is the cut of chunk c's next attempt: the job's limits, and
// what the provider's token counting taught (split.go).
func (d *Dispatcher) retryCut(c *sluice.Chunk) recut {
	return recut{attempt: c.Attempt + 1, tokens: d.cutTokens(c.Model)}
}

// regroup builds the chunks of the next attempt from requests of chunk c
// (indexes into reqs), a retry or a split (split.go) as k says. Their
// wire items are copied byte for byte from c's file and cut under the
// job's limits by the splitter's rule (sluice.Limits.Bound), with k.tokens
// as a further bound on estimated tokens. The new chunks have no id yet:
// the store gives them theirs when the chunk's end is recorded
// (sluice.Finish), and the moved requests name them by
// sluice.NewChunkRef. Their files are named after c and the attempt, which
// only this end of c writes.
func (d *Dispatcher) regroup(ctx context.Context, c *sluice.Chunk, reqs []sluice.Request, idx []int, k recut) ([]*sluice.Chunk, []sluice.Request, error) {
	return d.cut(ctx, c, []cutSource{{chunk: c, reqs: reqs, idx: idx}}, k)
}

// cut is regroup over the requests of one or more chunks' files (srcs),
// in order; the new chunks take c's URL, model and name.
func (d *Dispatcher) cut(ctx context.Context, c *sluice.Chunk, srcs []cutSource, k recut) ([]*sluice.Chunk, []sluice.Request, error) {
	codec, lim := sluice.ChunkFormat(d.prov.Codec(), c.URL, d.job.Limits)
	lim = k.limits(lim)
	env := codec.Envelope()
	ext := filepath.Ext(c.Path)
	kind, splits := "r", c.Splits
	switch {
	case k.split:
		kind, splits = "s", splits+1
	case k.combine:
		kind = "m"
	}
	var (
		chunks []*sluice.Chunk
		moved  []sluice.Request
		cur    *sluice.Chunk
		f      *os.File
		w      *bufio.Writer
		h      *xxh3.Hasher128 // cur's FileDigest, fed as its file is written
		itemB  int64
		buf    []byte
	)
	closeCur := func(bound string) error {
		if cur == nil {
			return nil
		}
		if _, err := w.Write(env.Footer); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		cur.Bytes = env.Size(cur.Requests, itemB)
		cur.Bound, cur.FileDigest = bound, sluice.FileDigestOf(h)
		chunks = append(chunks, cur)
		cur = nil
		return nil
	}
	for _, sc := range srcs {
		if err := d.fetch(ctx, sc.chunk.Path); err != nil {
			return nil, nil, err
		}
		if err := d.checkChunkFile(sc.chunk, false); err != nil {
			return nil, nil, err
		}
		src, err := os.Open(filepath.Join(d.job.Dir, sc.chunk.Path))
		if err != nil {
			return nil, nil, err
		}
		defer src.Close()
		for _, i := range sc.idx {
			r := sc.reqs[i]
			if cap(buf) < r.Length {
				buf = make([]byte, r.Length)
			}
			item := buf[:r.Length]
			if _, err := src.ReadAt(item, r.Offset); err != nil {
				return nil, nil, fmt.Errorf("read item of %q from %s: %w", r.CustomID, sc.chunk.Path, err)
			}
			if cur != nil {
				if bound := lim.Bound(env, cur.Requests, itemB, cur.EstTokens, int64(len(item)), r.Tokens); bound != "" {
					if err := closeCur(bound); err != nil {
						return nil, nil, err
					}
				}
			}
			if cur == nil {
				cur = &sluice.Chunk{Job: c.Job, Attempt: k.attempt, Splits: splits, URL: c.URL, Model: c.Model,
					Path: filepath.Join("chunks", fmt.Sprintf("c%06d-a%d-%s%d%s", c.ID, k.attempt, kind, len(chunks), ext)), State: sluice.ChunkPending}
				if f, err = os.Create(filepath.Join(d.job.Dir, cur.Path)); err != nil {
					return nil, nil, err
				}
				defer f.Close()
				h = sluice.NewFileHash()
				w = bufio.NewWriterSize(io.MultiWriter(f, h), 1<<20)
				itemB = 0
				if _, err := w.Write(env.Header); err != nil {
					return nil, nil, err
				}
			} else if _, err := w.Write(env.Sep); err != nil {
				return nil, nil, err
			}
			off := int64(len(env.Header)) + itemB + int64(cur.Requests)*int64(len(env.Sep))
			if _, err := w.Write(item); err != nil {
				return nil, nil, err
			}
			r.Chunk, r.Index, r.Offset, r.Attempt = sluice.NewChunkRef(len(chunks)), cur.Requests, off, k.attempt
			moved = append(moved, r)
			cur.Requests++
			cur.EstTokens += r.Tokens
			if n, ok := itemMaxOutput(item); ok {
				cur.MaxOutputTokens += n
			} else {
				cur.NoMaxRequests++
			}
			itemB += int64(len(item))
		}
	}
	if err := closeCur("end"); err != nil {
		return nil, nil, err
	}
	return chunks, moved, nil
}
