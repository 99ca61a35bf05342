package emulator

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Server is the emulator. Create it with New; serve Handler.
type Server struct {
	opts    Options
	dir     string // DataDir or a temp dir
	persist bool   // DataDir was given
	handler http.Handler

	mu        sync.Mutex // guards everything below
	idSeq     int64
	files     map[string]*fileRec
	batches   map[string]*batchRec
	active    map[string]*batchRec     // non-terminal batches
	permCache map[string][]int32       // processing order of active batches
	downloads map[string]int           // result downloads served, by file or batch id
	uploads   map[string]*gemUploadRec // Gemini resumable upload sessions
	upLocks   map[string]*sync.Mutex   // one per upload session
	processed *processedSet
	closed    bool

	calls    atomic.Int64
	faultMu  sync.Mutex
	faultRNG *rand.Rand

	statsMu sync.Mutex
	stats   Stats

	syncWin syncWindow // SyncLimit's window

	xai xaiState // xAI's batches (xai.go), guarded by mu
}

// New creates a Server. With opts.DataDir it loads the state left there by an
// earlier Server.
func New(opts Options) (*Server, error) {
	opts.applyDefaults()
	for _, k := range opts.FaultKinds {
		if !slices.Contains(allFaultKinds, k) {
			return nil, fmt.Errorf("emulator: unknown fault kind %q (want 429, 500, 502, 503 or reset)", k)
		}
	}
	if opts.StuckPhase != stFinalizing && opts.StuckPhase != stValidating {
		return nil, fmt.Errorf("emulator: unknown stuck phase %q (want finalizing or validating)", opts.StuckPhase)
	}
	s := &Server{
		opts:      opts,
		files:     map[string]*fileRec{},
		batches:   map[string]*batchRec{},
		active:    map[string]*batchRec{},
		permCache: map[string][]int32{},
		downloads: map[string]int{},
		uploads:   map[string]*gemUploadRec{},
		upLocks:   map[string]*sync.Mutex{},
		faultRNG:  rand.New(rand.NewPCG(uint64(opts.Seed), 0x5eed_fa17)),
	}
	var err error
	if opts.DataDir != "" {
		s.dir, s.persist = opts.DataDir, true
		if err := os.MkdirAll(s.dir, 0o755); err != nil {
			return nil, err
		}
	} else if s.dir, err = os.MkdirTemp("", "sluice-emulator-*"); err != nil {
		return nil, err
	}
	if err := s.initDirs(); err != nil {
		return nil, err
	}
	if err := s.xaiLoad(); err != nil {
		return nil, err
	}
	if s.persist {
		if err := s.load(); err != nil {
			return nil, err
		}
		s.processed, err = newProcessedSet(s.dir + "/processed.bin")
	} else {
		s.processed, err = newProcessedSet("")
	}
	if err != nil {
		return nil, err
	}
	s.handler = s.middleware(s.routes())
	return s, nil
}

// Handler serves the OpenAI, Anthropic, Cloudflare and Gemini APIs on one
// mux.
func (s *Server) Handler() http.Handler { return s.handler }

// Close flushes state (DataDir) or removes the temporary directory.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.saveState()
	err := s.processed.close()
	if !s.persist {
		if rerr := os.RemoveAll(s.dir); err == nil {
			err = rerr
		}
	}
	return err
}

// ListenAndServe serves an emulator on addr until ctx is done. ready, if not
// nil, is called with the bound address (useful with port 0).
func ListenAndServe(ctx context.Context, addr string, opts Options, ready func(addr string)) error {
	s, err := New(opts)
	if err != nil {
		return err
	}
	defer s.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 30 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if ready != nil {
		ready(ln.Addr().String())
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := srv.Shutdown(sctx)
		if e := <-errc; !errors.Is(e, http.ErrServerClosed) && err == nil {
			err = e
		}
		return err
	}
}

func (s *Server) now() time.Time { return s.opts.Now() }

func (s *Server) logf(format string, args ...any) {
	if s.opts.Logf != nil {
		s.opts.Logf(format, args...)
	}
}

// nextSeq allocates the next id sequence number. Caller holds s.mu.
func (s *Server) nextSeq() int64 {
	s.idSeq++
	return s.idSeq
}

func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	s.openaiRoutes(mux)
	s.anthropicRoutes(mux)
	s.cloudflareRoutes(mux)
	s.mistralRoutes(mux)
	s.togetherRoutes(mux)
	s.geminiRoutes(mux)
	s.xaiRoutes(mux)
	s.vertexRoutes(mux)
	s.bedrockRoutes(mux)
	mux.HandleFunc("GET /_emulator/stats", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.Stats())
	})
	mux.HandleFunc("GET /_emulator/info", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"base_urls": BaseURLs(baseURL(r))})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		familyError(w, errorFamily(r.URL.Path), http.StatusNotFound,
			"Unknown request URL: "+r.Method+" "+r.URL.Path+".")
	})
	return mux
}
