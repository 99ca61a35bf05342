// Package check is the one home of the assertions tests repeat: a call's
// error, and a value's list of properties, each failing the test with the
// value and which property did not hold.
package check

import (
	"slices"
	"testing"
)

// Fatal fails the test at once, showing v, when any of conds (each a
// property v must have) is false; the message names the first by position.
func Fatal(t testing.TB, what string, v any, conds ...bool) {
	t.Helper()
	if i := slices.Index(conds, false); i >= 0 {
		t.Fatalf("%s: check %d of %d failed: %+v", what, i+1, len(conds), v)
	}
}

// Error is Fatal that lets the test go on.
func Error(t testing.TB, what string, v any, conds ...bool) {
	t.Helper()
	if i := slices.Index(conds, false); i >= 0 {
		t.Errorf("%s: check %d of %d failed: %+v", what, i+1, len(conds), v)
	}
}

// NoErr fails the test at once with what when err is not nil.
func NoErr(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Outcome is a call's value and error, for Must.
type Outcome[T any] struct {
	v   T
	err error
}

// Try holds a call's two results: check.Try(c.Get(…)).Must(t, "get").
func Try[T any](v T, err error) Outcome[T] { return Outcome[T]{v, err} }

// Must returns the value, failing the test at once with what when the
// call's error is not nil.
func (o Outcome[T]) Must(t testing.TB, what string) T {
	t.Helper()
	NoErr(t, what, o.err)
	return o.v
}

// Deref is *p, or the zero value when p is nil.
func Deref[T any](p *T) T {
	var v T
	if p != nil {
		v = *p
	}
	return v
}

// Table checks f against a table of inputs and the output each wants;
// name is f's, for the message.
func Table[In, Out comparable](t testing.TB, name string, f func(In) Out, cases map[In]Out) {
	t.Helper()
	for in, want := range cases {
		if got := f(in); got != want {
			t.Errorf("%s(%#v) = %#v, want %#v", name, in, got, want)
		}
	}
}
