package emulator

import (
	"net/http/httptest"
	"testing"

	"github.com/sluice-batch/sluice/internal/emutest"
)

// start runs an emulator behind a real loopback HTTP server.
func start(t *testing.T, opts Options) (*Server, *httptest.Server) {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, emutest.Serve(t, s.Handler(), s.Close)
}
