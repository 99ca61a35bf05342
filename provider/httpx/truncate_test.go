package httpx_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sluice-batch/sluice/provider/httpx"
)

// cutShort promises the whole body's Content-Length, sends the first line
// and a half, and drops the connection: a proxy or provider cutting a
// result download. What arrived must never pass for a result file.
func cutShort(w http.ResponseWriter, r *http.Request) {
	full := `{"custom_id":"a","response":{"status_code":200,"body":{}}}` + "\n" + `{"custom_id":"b","response":{"status_code":200,"body":{}}}` + "\n"
	w.Header().Set("Content-Length", strconv.Itoa(len(full)))
	w.WriteHeader(http.StatusOK)
	w.Write([]byte(full[:len(full)*3/4]))
	http.NewResponseController(w).Flush()
	panic(http.ErrAbortHandler)
}

func TestDownloadCutShortIsNeverAccepted(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request){cutShort}}
	c, _ := newClient(t, httpx.Retry{MaxAttempts: 3})
	dir := t.TempDir()
	dst := filepath.Join(dir, "out.jsonl")
	n, err := c.Download(context.Background(), httpx.Call{Method: "GET", URL: serve(t, s)}, dst)
	if !errors.Is(err, io.ErrUnexpectedEOF) || n != 0 || s.count() != 3 {
		t.Fatalf("n %d err %v after %d attempts; want an unexpected EOF after 3", n, err, s.count())
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatalf("a cut download left %s: %v", dst, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("temp files left: %v", ents)
	}
}
