package sluice_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sluice-batch/sluice"
)

// lineErr names its own code, as splitter.LineError does.
type lineErr struct{}

func (lineErr) Error() string               { return "in.jsonl:3: bad line" }
func (lineErr) ErrorCode() sluice.ErrorCode { return sluice.CodeInvalid }

// TestErrorCodeOf: the code of an error is that of the first Coder in its
// chain, however deep it is wrapped; an error without one is internal, and
// nil has none. An Error without a message is silent.
func TestErrorCodeOf(t *testing.T) {
	stopped := &sluice.Error{Code: sluice.CodeStopped}
	for _, c := range []struct {
		err  error
		want sluice.ErrorCode
	}{
		{nil, ""},
		{errors.New("disk full"), sluice.CodeInternal},
		{sluice.Errorf(sluice.CodeInvalid, "--order %q", "x"), sluice.CodeInvalid},
		{fmt.Errorf("plan: %w", lineErr{}), sluice.CodeInvalid},
		{fmt.Errorf("run: %w", stopped), sluice.CodeStopped},
		{sluice.WithCode(sluice.CodeFailures, fmt.Errorf("x: %w", lineErr{})), sluice.CodeFailures},
		{errors.Join(errors.New("a"), lineErr{}), sluice.CodeInvalid},
	} {
		if got := sluice.ErrorCodeOf(c.err); got != c.want {
			t.Errorf("ErrorCodeOf(%v) = %q, want %q", c.err, got, c.want)
		}
	}
	if sluice.WithCode(sluice.CodeInvalid, nil) != nil {
		t.Error("WithCode of nil is not nil")
	}
	if !sluice.Silent(fmt.Errorf("x: %w", stopped)) || sluice.Silent(sluice.Errorf(sluice.CodeStopped, "cap")) {
		t.Error("Silent: want true for an Error without a message only")
	}
}
