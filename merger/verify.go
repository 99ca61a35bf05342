package merger

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"strconv"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// InvariantError reports results that break "every request exactly once":
// requests without a result (Missing), requests with more than one
// (Doubled), and results that belong to no request of the job (Unknown).
// Each list names at most 20 custom_ids ("#<ordinal>" when the id is
// not known); the counts are complete. A result whose custom_id is not the
// one expected at its ordinal counts as the expected request missing and the
// found custom_id unknown.
type InvariantError struct {
	Missing, Doubled, Unknown                []string
	MissingCount, DoubledCount, UnknownCount int64
}

const maxNames = 20

func (e *InvariantError) Error() string {
	var b strings.Builder
	b.WriteString("merger: results break the one-line-per-request invariant:")
	part := func(n int64, what string, names []string) {
		if n == 0 {
			return
		}
		fmt.Fprintf(&b, " %d %s (%s", n, what, strings.Join(names, ", "))
		if n > int64(len(names)) {
			b.WriteString(", ...")
		}
		b.WriteString(");")
	}
	part(e.MissingCount, "missing", e.Missing)
	part(e.DoubledCount, "doubled", e.Doubled)
	part(e.UnknownCount, "unknown", e.Unknown)
	return strings.TrimSuffix(b.String(), ";")
}

func (e *InvariantError) any() bool {
	return e.MissingCount+e.DoubledCount+e.UnknownCount > 0
}

func note(list *[]string, count *int64, name string) {
	*count++
	if len(*list) < maxNames {
		*list = append(*list, strings.Clone(name))
	}
}

func (e *InvariantError) missing(name string) { note(&e.Missing, &e.MissingCount, name) }
func (e *InvariantError) doubled(name string) { note(&e.Doubled, &e.DoubledCount, name) }
func (e *InvariantError) unknown(name string) { note(&e.Unknown, &e.UnknownCount, name) }

// customID extracts the output line's custom_id without allocating: the
// string aliases line.
func customID(line []byte) (string, bool) {
	const p = `{"custom_id":"`
	if bytes.HasPrefix(line, []byte(p)) {
		rest := line[len(p):]
		if i := bytes.IndexByte(rest, '"'); i >= 0 && bytes.IndexByte(rest[:i], '\\') < 0 {
			return unsafe.String(unsafe.SliceData(rest), i), true
		}
	}
	r := gjson.Get(unsafe.String(unsafe.SliceData(line), len(line)), "custom_id")
	if r.Type != gjson.String {
		return "", false
	}
	return r.Str, true
}

// name is how a request shows in an InvariantError: its custom_id, else
// "#<ordinal>".
func name(id string, ord int64) string {
	if id != "" {
		return id
	}
	return "#" + strconv.FormatInt(ord, 10)
}

func recName(r *rec) string {
	id, _ := customID(r.json)
	return name(id, r.ord)
}

// writers are the output and errors files of a merge.
type writers struct {
	out, errs         *atomicFile
	succeeded, failed int64
	rejected          int64 // input lines rejected as invalid (Config.Rejected)
}

func (w *writers) write(r *rec) error {
	if err := w.out.writeLine(r.json); err != nil {
		return err
	}
	if r.failed {
		w.failed++
		return w.errs.writeLine(r.json)
	}
	w.succeeded++
	return nil
}

func (w *writers) abort() {
	if w != nil {
		w.out.abort()
		w.errs.abort()
	}
}

// verifier checks the invariant and writes the lines while no violation was
// seen; at the first one it drops the outputs and only counts.
type verifier struct {
	inv InvariantError
	w   *writers // nil when verifying only, or after a violation
	n   int64
}

func (v *verifier) violated() {
	v.w.abort()
	v.w = nil
}

func (v *verifier) emit(r *rec) error {
	if v.w == nil {
		return nil
	}
	return v.w.write(r)
}

// tick checks ctx every few thousand records.
func (v *verifier) tick(ctx context.Context) error {
	v.n++
	if v.n&4095 == 0 {
		return ctx.Err()
	}
	return nil
}

// expected calls fn for every request in ordinal order: from cfg.Expected,
// else 0..Total-1 with empty custom_ids (ids then are not checked). It
// checks that Expected yields exactly the ordinals 0..Total-1 in order.
func (m *job) expected(fn func(ord int64, id string) (bool, error)) error {
	var ferr error
	next := int64(0)
	if m.cfg.Expected == nil {
		for ; next < m.cfg.Total; next++ {
			if ok, err := fn(next, ""); !ok || err != nil {
				return err
			}
		}
		return nil
	}
	err := m.cfg.Expected(func(ord int64, id string) bool {
		if ord != next || ord >= m.cfg.Total {
			ferr = fmt.Errorf("merger: Expected yielded ordinal %d, want %d (Total %d)", ord, next, m.cfg.Total)
			return false
		}
		next++
		ok, err := fn(ord, id)
		ferr = err
		return ok && err == nil
	})
	if err == nil {
		err = ferr
	}
	if err == nil && next != m.cfg.Total {
		err = fmt.Errorf("merger: Expected yielded %d requests, Total is %d", next, m.cfg.Total)
	}
	return err
}

// zip walks the merged stream beside the expected requests: each ordinal
// exactly once, with the expected custom_id, and no ordinal beyond them.
func (m *job) zip(ctx context.Context, it *mergeIter, v *verifier) error {
	r, err := it.next()
	if err != nil {
		return err
	}
	rej, err := openRejected(m.rejectedPath(v))
	if err != nil {
		return err
	}
	defer rej.close()
	err = m.expected(func(ord int64, id string) (bool, error) {
		if err := v.tick(ctx); err != nil {
			return false, err
		}
		if err := rej.emitBefore(ctx, ord, v); err != nil {
			return false, err
		}
		matched := false
		for r != nil && r.ord <= ord {
			if r.ord == ord && !matched {
				matched = true
				got := id
				if id != "" {
					got, _ = customID(r.json)
				}
				if got != id {
					v.inv.missing(id)
					v.inv.unknown(name(got, r.ord))
					v.violated()
				} else if err := v.emit(r); err != nil {
					return false, err
				}
			} else { // a second result for a request
				if id == "" {
					id, _ = customID(r.json)
				}
				v.inv.doubled(name(id, r.ord))
				v.violated()
				if err := v.tick(ctx); err != nil {
					return false, err
				}
			}
			if r, err = it.next(); err != nil {
				return false, err
			}
		}
		if !matched {
			v.inv.missing(name(id, ord))
			v.violated()
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	if err := rej.emitBefore(ctx, -1, v); err != nil {
		return err
	}
	for ; r != nil; r, err = it.next() {
		v.inv.unknown(recName(r))
		v.violated()
		if err := v.tick(ctx); err != nil {
			return err
		}
	}
	return err
}

// rejectedPath is Config.Rejected when v writes, else "" (verifying
// alone has no use for rejected lines).
func (m *job) rejectedPath(v *verifier) string {
	if v.w == nil {
		return ""
	}
	return m.cfg.Rejected
}

// pairHash hashes (ordinal, custom_id) for an order-independent sum.
func pairHash(seed maphash.Seed, ord int64, id string) uint64 {
	return mix(maphash.String(seed, id) ^ mix(uint64(ord)+0x9e3779b97f4a7c15))
}

func mix(x uint64) uint64 { // splitmix64's finalizer
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
