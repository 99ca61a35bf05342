package emulator

import (
	"bufio"
	"encoding/binary"
	"errors"
	"hash/fnv"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Stats are the emulator's counters, served as JSON at GET /_emulator/stats.
type Stats struct {
	APICalls int64 `json:"api_calls"`
	// InFlight counts the API calls being served now (not /_emulator/
	// ones): a test that killed a client waits for it to reach 0 before it
	// reads what the client's last calls did. Not kept across restarts.
	InFlight       int64 `json:"in_flight"`
	FilesUploaded  int64 `json:"files_uploaded"`
	BatchesCreated int64 `json:"batches_created"`
	// SyncRequests counts the synchronous calls the model answered (the
	// direct endpoints: POST /v1/chat/completions, ...); the 2xx among
	// them count in RequestsProcessed too.
	SyncRequests int64 `json:"sync_requests"`
	// SyncRateLimited counts synchronous calls refused past SyncLimit.
	SyncRateLimited int64 `json:"sync_rate_limited"`
	// RequestsProcessed counts executed lines (succeeded, per-line error or
	// omitted); expired or cancelled lines that were never run do not count.
	RequestsProcessed int64 `json:"requests_processed"`
	// RequestsProcessedMoreThanOnce counts every execution of a (job,
	// custom_id) after its first one: money spent twice.
	RequestsProcessedMoreThanOnce int64 `json:"requests_processed_more_than_once"`

	FaultsInjected int64 `json:"faults_injected"`
	Faults429      int64 `json:"faults_429"`
	Faults5xx      int64 `json:"faults_5xx"`
	FaultsReset    int64 `json:"faults_reset"`
	SlowCalls      int64 `json:"slow_calls"`

	BatchesCompleted int64 `json:"batches_completed"`
	BatchesFailed    int64 `json:"batches_failed"`
	BatchesExpired   int64 `json:"batches_expired"`
	BatchesCancelled int64 `json:"batches_cancelled"`

	LinesSucceeded int64 `json:"lines_succeeded"`
	LinesErrored   int64 `json:"lines_errored"`
	LinesOmitted   int64 `json:"lines_omitted"`
	LinesExpired   int64 `json:"lines_expired"`
	LinesCancelled int64 `json:"lines_cancelled"`

	// Hostile output (see Options). LinesSucceeded above counts only the
	// successes delivered intact in a result file that can be downloaded:
	// a success replaced by a malformed line or in a file answered 404 is
	// counted in LinesMalformed or LinesLost instead. Extra lines
	// (duplicates, unknown custom_ids) are counted only here.
	LinesMalformed     int64 `json:"lines_malformed"`
	LinesUnknown       int64 `json:"lines_unknown_custom_id"`
	LinesDuplicated    int64 `json:"lines_duplicated"`
	LinesLost          int64 `json:"lines_lost"`
	DownloadsTruncated int64 `json:"downloads_truncated"`
	BatchesStuck       int64 `json:"batches_stuck"`
	BatchesForgotten   int64 `json:"batches_forgotten"`

	// ResultDownloads are the batch ids of result file downloads started
	// (OpenAI, Mistral, Together), in the order they came, the last
	// maxResultDownloads of them. ResultsExpired counts requests for a
	// result file past its expires_at (answered 404).
	ResultDownloads []string `json:"result_downloads"`
	ResultsExpired  int64    `json:"results_expired"`
	// OutputExpiresAfter counts OpenAI batch creates by the
	// output_expires_after.seconds they sent ("none": absent).
	OutputExpiresAfter map[string]int64 `json:"output_expires_after"`

	// ByFamily holds per API family ("openai", "anthropic", "cloudflare",
	// "gemini", "mistral", "together", "xai", "vertex", "bedrock") counters.
	ByFamily map[string]FamilyStats `json:"by_family"`
}

// FamilyStats are the per-API-family counters inside Stats.
type FamilyStats struct {
	BatchesCreated                int64 `json:"batches_created"`
	RequestsProcessed             int64 `json:"requests_processed"`
	RequestsProcessedMoreThanOnce int64 `json:"requests_processed_more_than_once"`
}

func (st *Stats) family(f string) FamilyStats {
	if st.ByFamily == nil {
		st.ByFamily = map[string]FamilyStats{}
	}
	return st.ByFamily[f]
}

func (st Stats) clone() Stats {
	c := st
	c.ByFamily = make(map[string]FamilyStats, 3)
	for _, f := range []string{famOpenAI, famAnthropic, famCloudflare, famGemini, famMistral, famTogether, famXAI, famVertex, famBedrock} {
		c.ByFamily[f] = st.ByFamily[f]
	}
	c.ResultDownloads = slices.Clone(st.ResultDownloads)
	c.OutputExpiresAfter = maps.Clone(st.OutputExpiresAfter)
	return c
}

// maxResultDownloads bounds Stats.ResultDownloads.
const maxResultDownloads = 1000

func (st *Stats) noteDownload(batch string) {
	if len(st.ResultDownloads) >= maxResultDownloads {
		st.ResultDownloads = slices.Delete(st.ResultDownloads, 0, 1)
	}
	st.ResultDownloads = append(st.ResultDownloads, batch)
}

func (st *Stats) noteOutputExpiry(secs int64) {
	if st.OutputExpiresAfter == nil {
		st.OutputExpiresAfter = map[string]int64{}
	}
	k := "none"
	if secs > 0 {
		k = strconv.FormatInt(secs, 10)
	}
	st.OutputExpiresAfter[k]++
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	return s.stats.clone()
}

func (s *Server) bump(fn func(st *Stats)) {
	s.statsMu.Lock()
	fn(&s.stats)
	s.statsMu.Unlock()
}

// countCreated counts a batch created in family, in all and in the
// family's own counters.
func (s *Server) countCreated(family string) {
	s.bump(func(st *Stats) {
		st.BatchesCreated++
		fs := st.family(family)
		fs.BatchesCreated++
		st.ByFamily[family] = fs
	})
}

// processedSet remembers which (family, job, custom_id) keys were executed,
// as 64-bit hashes (collisions are negligible at millions of keys). When the
// server has a DataDir, keys are appended to processed.bin.
type processedSet struct {
	seen map[uint64]struct{}
	path string
	f    *os.File
	w    *bufio.Writer
}

func newProcessedSet(path string) (*processedSet, error) {
	p := &processedSet{seen: map[uint64]struct{}{}, path: path}
	if path == "" {
		return p, nil
	}
	if f, err := os.Open(path); err == nil {
		r := bufio.NewReader(f)
		var b [8]byte
		for {
			if _, err := io.ReadFull(r, b[:]); err != nil {
				break // EOF or a torn last record
			}
			p.seen[binary.LittleEndian.Uint64(b[:])] = struct{}{}
		}
		f.Close()
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	p.f, p.w = f, bufio.NewWriter(f)
	return p, nil
}

// mark records an execution and reports whether the key was seen before.
func (p *processedSet) mark(family, job, customID string) bool {
	h := fnv.New64a()
	h.Write([]byte(family))
	h.Write([]byte{0})
	h.Write([]byte(job))
	h.Write([]byte{0})
	h.Write([]byte(customID))
	k := h.Sum64()
	if _, ok := p.seen[k]; ok {
		return true
	}
	p.seen[k] = struct{}{}
	if p.w != nil {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], k)
		p.w.Write(b[:])
	}
	return false
}

func (p *processedSet) flush() error {
	if p.w == nil {
		return nil
	}
	if err := p.w.Flush(); err != nil {
		return err
	}
	return p.f.Sync()
}

func (p *processedSet) close() error {
	if p.f == nil {
		return nil
	}
	err := p.flush()
	if cerr := p.f.Close(); err == nil {
		err = cerr
	}
	p.f, p.w = nil, nil
	return err
}

var chunkSuffix = regexp.MustCompile(`-c[0-9]+`)

// jobKeyFromFilename returns the prefix of a sluice upload name
// ("sluice-<job>-c<chunk>-a<attempt>-d<digest>.jsonl") up to its last "-c<digits>",
// or "" when the name has no such part.
func jobKeyFromFilename(name string) string {
	locs := chunkSuffix.FindAllStringIndex(name, -1)
	if len(locs) == 0 {
		return ""
	}
	return name[:locs[len(locs)-1][0]]
}

// jobKeyOpenAI is the job a batch's lines belong to for duplicate counting.
func jobKeyOpenAI(metadata map[string]string, filename string) string {
	if j := strings.TrimSpace(metadata["sluice_job"]); j != "" {
		return j
	}
	return jobKeyFromFilename(filename)
}

// The headers a client names a synchronous call's job and custom_id with,
// so a request answered by a batch line and again by a direct call (or by
// two direct calls) counts in RequestsProcessedMoreThanOnce. sluice's
// realtime fallback sends them; the custom_id is percent-encoded.
const (
	HeaderSyncJob      = "X-Sluice-Job"
	HeaderSyncCustomID = "X-Sluice-Custom-Id"
)

// countSync counts a direct call the model answered with status: a 2xx is
// a processed request, marked under job (the family's duplicate key: the
// call's HeaderSyncJob for OpenAI, "" for Anthropic) and its custom_id
// when the call names one (HeaderSyncCustomID).
func (s *Server) countSync(family, job string, r *http.Request, status int) {
	ok := status >= 200 && status < 300
	dup := false
	if cid, err := url.PathUnescape(r.Header.Get(HeaderSyncCustomID)); ok && err == nil && cid != "" {
		s.locked(func() error { dup = s.processed.mark(family, job, cid); return nil })
	}
	s.bump(func(st *Stats) {
		st.SyncRequests++
		if !ok {
			return
		}
		st.RequestsProcessed++
		fs := st.family(family)
		fs.RequestsProcessed++
		if dup {
			st.RequestsProcessedMoreThanOnce++
			fs.RequestsProcessedMoreThanOnce++
		}
		st.ByFamily[family] = fs
	})
}

// syncJobKey is the duplicate-count job of a direct call naming job: the
// key the family's batches count under (OpenAI and Mistral: the
// sluice_job metadata; Together and Gemini: the prefix of its upload or
// display name, "sluice-<job>").
func syncJobKey(family, job string) string {
	if (family == famTogether || family == famGemini || family == famBedrock) && job != "" {
		return "sluice-" + job
	}
	return job
}

// syncWait waits SyncDelay after the model ran (and charged) before the
// answer leaves: a client gone meanwhile loses an answer it paid for.
func (s *Server) syncWait(r *http.Request) error {
	if s.opts.SyncDelay <= 0 {
		return nil
	}
	t := time.NewTimer(s.opts.SyncDelay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-r.Context().Done():
		return r.Context().Err()
	}
}

// syncWindow is the SyncLimit window of synchronous calls.
type syncWindow struct {
	mu    sync.Mutex
	start time.Time
	n     int
}

// syncAdmit counts a synchronous call against SyncLimit and writes the
// rate-limit headers; false: it answered 429 and the call must stop.
func (s *Server) syncAdmit(w http.ResponseWriter, family string) bool {
	if s.opts.SyncLimit <= 0 {
		return true
	}
	win := s.opts.SyncWindow
	if win <= 0 {
		win = time.Minute
	}
	now := s.now()
	sw := &s.syncWin
	sw.mu.Lock()
	if now.Sub(sw.start) >= win {
		sw.start, sw.n = now, 0
	}
	ok := sw.n < s.opts.SyncLimit
	if ok {
		sw.n++
	}
	remaining, reset := s.opts.SyncLimit-sw.n, sw.start.Add(win).Sub(now)
	sw.mu.Unlock()
	h := w.Header()
	if family == famAnthropic {
		// RFC 3339 at whole seconds: the next whole second after the reset.
		h.Set("anthropic-ratelimit-requests-limit", strconv.Itoa(s.opts.SyncLimit))
		h.Set("anthropic-ratelimit-requests-remaining", strconv.Itoa(remaining))
		h.Set("anthropic-ratelimit-requests-reset", now.Add(reset).Truncate(time.Second).Add(time.Second).UTC().Format(time.RFC3339))
	} else {
		h.Set("x-ratelimit-limit-requests", strconv.Itoa(s.opts.SyncLimit))
		h.Set("x-ratelimit-remaining-requests", strconv.Itoa(remaining))
		h.Set("x-ratelimit-reset-requests", reset.Round(time.Millisecond).String())
	}
	if ok {
		return true
	}
	s.bump(func(st *Stats) { st.SyncRateLimited++ })
	h.Set("Retry-After", strconv.Itoa(int(math.Ceil(reset.Seconds()))))
	if family == famAnthropic {
		antError(w, http.StatusTooManyRequests, "rate_limit_error", "Number of requests has exceeded your rate limit")
	} else {
		oaiError(w, http.StatusTooManyRequests, "requests", "Rate limit reached for requests", "", "rate_limit_exceeded")
	}
	return false
}
