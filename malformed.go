package sluice

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// ErrMalformed is matched (errors.Is) by every MalformedError and every
// MalformedLines.
var ErrMalformed = errors.New("malformed result")

// MalformedError is one result line (or, for answers that are one JSON
// document, one item) of a provider's result file that does not parse: not
// JSON, JSON without a custom_id, a line cut short, a line over the length
// bound.
type MalformedError struct {
	File string // the result file as downloaded
	Line int    // 1-based line (or item); 0 when the whole file is at fault
	Err  error
}

func (e *MalformedError) Error() string {
	if e.Line <= 0 {
		return fmt.Sprintf("%s: malformed result: %v", e.File, e.Err)
	}
	return fmt.Sprintf("%s:%d: malformed result: %v", e.File, e.Line, e.Err)
}

func (e *MalformedError) Unwrap() []error { return []error{ErrMalformed, e.Err} }

// Where is the file's base name and the line, as "name:line".
func (e *MalformedError) Where() string {
	if e.Line <= 0 {
		return filepath.Base(e.File)
	}
	return fmt.Sprintf("%s:%d", filepath.Base(e.File), e.Line)
}

// MalformedKept bounds the MalformedErrors a MalformedLines keeps.
const MalformedKept = 10

// MalformedLines is what Provider.Decode returns when it skipped result
// lines that do not parse: every line that did parse was delivered, so the
// caller may use them and treat the requests of the skipped lines as
// missing. It keeps the first MalformedKept lines and counts the rest.
type MalformedLines struct {
	Count int
	Lines []*MalformedError
}

// Add records one skipped line.
func (m *MalformedLines) Add(e *MalformedError) {
	m.Count++
	if len(m.Lines) < MalformedKept {
		m.Lines = append(m.Lines, e)
	}
}

// AddAll records every line o skipped, after those m has.
func (m *MalformedLines) AddAll(o *MalformedLines) {
	for _, e := range o.Lines {
		m.Add(e)
	}
	m.Count += o.Count - len(o.Lines)
}

// AddErr records err when it is (or wraps) a *MalformedError and reports
// whether it was.
func (m *MalformedLines) AddErr(err error) bool {
	var me *MalformedError
	if !errors.As(err, &me) {
		return false
	}
	m.Add(me)
	return true
}

// Err returns m, or nil when no line was skipped.
func (m *MalformedLines) Err() error {
	if m == nil || m.Count == 0 {
		return nil
	}
	return m
}

func (m *MalformedLines) Error() string {
	return fmt.Sprintf("%d malformed result line(s) skipped: %s", m.Count, m.Summary(3))
}

// Summary names the first n skipped lines as file:line (reason), and how
// many more there were.
func (m *MalformedLines) Summary(n int) string {
	var parts []string
	for i, e := range m.Lines {
		if i == n {
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%v)", e.Where(), e.Err))
	}
	s := strings.Join(parts, "; ")
	if more := m.Count - min(n, len(m.Lines)); more > 0 {
		s += fmt.Sprintf("; and %d more", more)
	}
	return s
}

func (m *MalformedLines) Unwrap() []error {
	errs := make([]error, 0, len(m.Lines)+1)
	for _, e := range m.Lines {
		errs = append(errs, e)
	}
	return append(errs, ErrMalformed)
}
