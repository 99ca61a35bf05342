package merger

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// rejected reads Config.Rejected: the input lines the splitter rejected,
// as results records in input order whose ordinal is that of the valid
// request that follows each line (splitter.RejectedResults). They are not
// requests: the invariant checks never see them. Each goes to the errors
// file, and, when it has a custom_id, to the output, before the request of
// its ordinal. One record is held at a time.
type rejected struct {
	f   *os.File
	sc  *scanner
	cur *rec // the next record, nil at the end
	n   int64
}

func openRejected(path string) (*rejected, error) {
	r := &rejected{}
	if path == "" {
		return r, nil
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("merger: %w", err)
	}
	r.f, r.sc = f, newScanner(path, f, indexBuffer)
	return r, r.advance()
}

func (r *rejected) advance() error {
	r.cur = nil
	if r.sc == nil {
		return nil
	}
	ok, err := r.sc.next()
	if err != nil {
		return err
	}
	if ok {
		r.cur = &r.sc.cur
	}
	return nil
}

// emitBefore writes every rejected line whose place is before the request
// of ordinal ord (all of them when ord < 0).
func (r *rejected) emitBefore(ctx context.Context, ord int64, v *verifier) error {
	for r.cur != nil && (ord < 0 || r.cur.ord <= ord) {
		if v.w != nil {
			if err := v.w.writeRejected(r.cur); err != nil {
				return err
			}
		}
		r.n++
		if r.n&4095 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if err := r.advance(); err != nil {
			return err
		}
	}
	return nil
}

func (r *rejected) close() {
	if r != nil && r.f != nil {
		r.f.Close()
	}
}

// writeRejected writes a rejected line: to the output when it has a
// custom_id (a line without one has no place there: nothing in the output
// could name it), and always to the errors file.
func (w *writers) writeRejected(r *rec) error {
	w.rejected++
	if id, ok := customID(r.json); ok && id != "" {
		if err := w.out.writeLine(r.json); err != nil {
			return err
		}
	}
	return w.errs.writeLine(r.json)
}
