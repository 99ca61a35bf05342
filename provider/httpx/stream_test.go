package httpx_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider/httpx"
)

const twoLines = `{"custom_id":"a","response":{"status_code":200,"body":{}}}` + "\n" + `{"custom_id":"b","response":{"status_code":200,"body":{}}}` + "\n"

func whole(w http.ResponseWriter, r *http.Request) { io.WriteString(w, twoLines) }

// lines is a Stream reader handing each line on to got; started once it
// handed one.
func lines(got *[]string) func(io.Reader) (bool, error) {
	return func(body io.Reader) (bool, error) {
		br := bufio.NewReader(body)
		started := false
		for {
			l, err := br.ReadString('\n')
			if err == io.EOF && l == "" {
				return started, nil
			}
			if err != nil {
				return started, err // a line cut short is not handed on
			}
			*got = append(*got, l)
			started = true
		}
	}
}

// TestStreamRetriesBeforeAnyLine: an answer that breaks before the reader
// handed anything on is repeated with the retry policy, like any call; the
// reader gets every line once.
func TestStreamRetriesBeforeAnyLine(t *testing.T) {
	cutEarly := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, `{"custom_id":"a","resp`) // no whole line
		http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	}
	s := &script{answers: []func(http.ResponseWriter, *http.Request){cutEarly, cutEarly, whole}}
	c, _ := newClient(t, httpx.Retry{MaxAttempts: 5})
	var got []string
	err := c.Stream(context.Background(), httpx.Call{Method: "GET", URL: serve(t, s)}, func(body io.Reader) (bool, error) {
		got = got[:0] // a repeated answer is read afresh
		return lines(&got)(body)
	})
	if err != nil || s.count() != 3 || len(got) != 2 {
		t.Fatalf("err %v after %d attempts, %d lines; want the third attempt's 2 lines", err, s.count(), len(got))
	}
}

// TestStreamBrokenAfterLinesIsNotRepeated: once the reader handed lines
// on, a break ends the call at once with a *BrokenError (matching
// sluice.ErrStreamBroken and the read failure, never a *ReadError): a
// repeat would hand them on twice.
func TestStreamBrokenAfterLinesIsNotRepeated(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request){cutShort, whole}}
	c, _ := newClient(t, httpx.Retry{MaxAttempts: 5})
	var got []string
	err := c.Stream(context.Background(), httpx.Call{Method: "GET", URL: serve(t, s)}, lines(&got))
	var be *httpx.BrokenError
	var re *httpx.ReadError
	if !errors.As(err, &be) || !errors.Is(err, sluice.ErrStreamBroken) || !errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &re) {
		t.Fatalf("err %v (%T), want a BrokenError of an unexpected EOF", err, err)
	}
	if s.count() != 1 || len(got) != 1 {
		t.Fatalf("%d attempts, lines %q; want 1 attempt, the one whole line", s.count(), got)
	}
}
