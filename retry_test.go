package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/sluice-batch/sluice"
)

// TestRetryable: the one classifier of failed provider calls.
func TestRetryable(t *testing.T) {
	opErr := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{&sluice.APIError{Status: 408}, true},
		{&sluice.APIError{Status: 409}, true},
		{&sluice.APIError{Status: 429}, true},
		{&sluice.APIError{Status: 500}, true},
		{&sluice.APIError{Status: 529}, true},
		{fmt.Errorf("create batch: %w", &sluice.APIError{Status: 503}), true},
		{&sluice.APIError{Status: 400}, false},
		{&sluice.APIError{Status: 401}, false},
		{&sluice.APIError{Status: 404}, false},
		{opErr, true},
		{fmt.Errorf("list batches: %w", opErr), true},
		{fmt.Errorf("%w: %w", sluice.ErrUnreachable, opErr), false},
		{context.Canceled, false},
		{errors.New("cannot parse the listing"), false},
	} {
		if got := sluice.Retryable(c.err); got != c.want {
			t.Errorf("Retryable(%v) = %v, want %v", c.err, got, c.want)
		}
		var ae *sluice.APIError
		if errors.As(c.err, &ae) && ae.Retryable() != sluice.RetryableStatus(ae.Status) {
			t.Errorf("APIError %d: Retryable and RetryableStatus disagree", ae.Status)
		}
	}
}
