package httpx_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// A call fails with sluice.ErrUnreachable once no call of the client got
// any answer for MaxTotalWait: one call giving up early is not enough, and
// any answer (even an error status) starts the count again.
func TestUnreachableAfterMaxTotalWait(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String() + "/v1/files"
	ln.Close()
	c, clock := newClient(t, httpx.Retry{MaxAttempts: 2, MaxTotalWait: time.Minute})
	var up atomic.Bool
	call := func() error {
		url := dead
		if up.Load() {
			url = srv.URL
		}
		_, err := c.Do(context.Background(), "GET", url, nil, nil)
		return err
	}
	if err := call(); err == nil || errors.Is(err, sluice.ErrUnreachable) {
		t.Fatalf("first call: %v, want a plain connection error", err)
	}
	clock.Advance(30 * time.Second)
	if err := call(); errors.Is(err, sluice.ErrUnreachable) {
		t.Fatalf("30s down, under MaxTotalWait: %v", err)
	}
	clock.Advance(30 * time.Second)
	err = call()
	if !errors.Is(err, sluice.ErrUnreachable) {
		t.Fatalf("a minute down: %v, want ErrUnreachable", err)
	}
	if !containsAll(err.Error(), dead, "connection refused") {
		t.Errorf("the error does not name the URL and the failure: %v", err)
	}
	// An answer, even a 503, means the endpoint is there.
	up.Store(true)
	if err := call(); errors.Is(err, sluice.ErrUnreachable) || err == nil {
		t.Fatalf("answered 503: %v", err)
	}
	up.Store(false)
	if err := call(); errors.Is(err, sluice.ErrUnreachable) {
		t.Fatalf("down again just now: %v", err)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// A single call against an endpoint that refuses every connection retries
// up to MaxTotalWait since the first failure, not less (its own waits
// would stop at 3.5 s of 5), and then says the endpoint is unreachable:
// --http-max-wait is when an unreachable endpoint is reported.
func TestUnreachableWithinOneCall(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String() + "/v1/files"
	ln.Close()
	c, clock := newClient(t, httpx.Retry{MaxTotalWait: 5 * time.Second})
	start := clock.Now()
	_, err = c.Do(context.Background(), "GET", dead, nil, nil)
	if !errors.Is(err, sluice.ErrUnreachable) {
		t.Fatalf("got %v, want ErrUnreachable", err)
	}
	if took := clock.Now().Sub(start); took != 5*time.Second {
		t.Errorf("waited %s, want 5s", took)
	}
}
