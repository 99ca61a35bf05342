package splitter

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// pending holds the request rows of an open chunk until the chunk closes
// and gets its id (ids are given in order of closing). Rows are kept
// compact (varints and the custom_id's bytes, ~15 bytes plus the id) and
// spilled to a file beside the chunk when all groups together hold more
// than pendingMemory, so memory stays flat even when a provider allows
// millions of requests per batch.
type pending struct {
	buf     []byte
	n       int      // rows in buf
	spill   *os.File // rows spilled so far, nil if none
	spilled int
	path    string // spill file path, when spill != nil
}

// pendingMemory bounds the in-memory pending rows of all groups together
// (a variable for tests).
var pendingMemory = 16 << 20

// row is one pending request row.
type row struct {
	ordinal, line, tokens int64
	length                int
	customID              []byte
}

func (p *pending) add(r *row) {
	p.buf = binary.AppendUvarint(p.buf, uint64(r.ordinal))
	p.buf = binary.AppendUvarint(p.buf, uint64(r.line))
	p.buf = binary.AppendUvarint(p.buf, uint64(r.tokens))
	p.buf = binary.AppendUvarint(p.buf, uint64(r.length))
	p.buf = binary.AppendUvarint(p.buf, uint64(len(r.customID)))
	p.buf = append(p.buf, r.customID...)
	p.n++
}

// flushToDisk moves the in-memory rows to the spill file.
func (p *pending) flushToDisk(path string) error {
	if p.spill == nil {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		p.spill, p.path = f, path
	}
	if _, err := p.spill.Write(p.buf); err != nil {
		return fmt.Errorf("spill pending rows: %w", err)
	}
	p.spilled += p.n
	p.buf, p.n = p.buf[:0], 0
	return nil
}

var errBadRow = errors.New("corrupt pending row")

// each calls fn for every row in order: spilled rows first, then the ones
// in memory. r.customID aliases a buffer valid during the call only.
func (p *pending) each(fn func(i int, r *row) error) error {
	i := 0
	var r row
	if p.spill != nil {
		if _, err := p.spill.Seek(0, io.SeekStart); err != nil {
			return err
		}
		br := bufio.NewReaderSize(p.spill, 256<<10)
		var id []byte
		for k := 0; k < p.spilled; k++ {
			var v [5]uint64
			for j := range v {
				x, err := binary.ReadUvarint(br)
				if err != nil {
					return fmt.Errorf("read pending rows: %w", err)
				}
				v[j] = x
			}
			if uint64(cap(id)) < v[4] {
				id = make([]byte, v[4])
			}
			id = id[:v[4]]
			if _, err := io.ReadFull(br, id); err != nil {
				return fmt.Errorf("read pending rows: %w", err)
			}
			r = row{ordinal: int64(v[0]), line: int64(v[1]), tokens: int64(v[2]), length: int(v[3]), customID: id}
			if err := fn(i, &r); err != nil {
				return err
			}
			i++
		}
		if _, err := p.spill.Seek(0, io.SeekEnd); err != nil {
			return err
		}
	}
	b := p.buf
	for k := 0; k < p.n; k++ {
		var v [5]uint64
		for j := range v {
			x, n := binary.Uvarint(b)
			if n <= 0 {
				return errBadRow
			}
			v[j], b = x, b[n:]
		}
		if uint64(len(b)) < v[4] {
			return errBadRow
		}
		r = row{ordinal: int64(v[0]), line: int64(v[1]), tokens: int64(v[2]), length: int(v[3]), customID: b[:v[4]]}
		b = b[v[4]:]
		if err := fn(i, &r); err != nil {
			return err
		}
		i++
	}
	return nil
}

// find returns the line of the pending row with this custom_id.
func (p *pending) find(id string) (line int64, found bool, err error) {
	errFound := errors.New("found")
	err = p.each(func(_ int, r *row) error {
		if string(r.customID) == id {
			line = r.line
			return errFound
		}
		return nil
	})
	if err == errFound {
		return line, true, nil
	}
	return 0, false, err
}

// reset empties p and removes its spill file.
func (p *pending) reset() {
	if p.spill != nil {
		p.spill.Close()
		os.Remove(p.path)
		p.spill, p.path, p.spilled = nil, "", 0
	}
	p.buf, p.n = p.buf[:0], 0
	if cap(p.buf) > 1<<20 {
		p.buf = nil // do not keep a big buffer per idle group
	}
}

func (p *pending) rows() int { return p.spilled + p.n }
