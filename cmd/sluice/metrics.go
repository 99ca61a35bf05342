package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/atomicfile"
	"github.com/sluice-batch/sluice/internal/telemetry"
	"github.com/sluice-batch/sluice/tracker"
)

// Metrics (docs/monitoring.md): --metrics-addr serves Prometheus metrics
// while the run lives, --metrics-file writes them, in the text format
// node_exporter's textfile collector reads, when it ends. The job's
// figures (requests, batches, tokens, spend) are read from the tracker at
// each scrape; the API calls, retries and reconciles are counted as they
// happen (internal/telemetry). Every series carries the label job_id.

type metricsFlags struct {
	addr string
	file string
}

func (m *metricsFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&m.addr, "metrics-addr", "", "serve Prometheus metrics at http://HOST:PORT/metrics while the run lives (requests and batches by state, tokens, spend and cap, API calls by endpoint with status and latency, retries, reconciles); port 0 picks a free one, logged")
	fs.StringVar(&m.file, "metrics-file", "", "when the run ends (done, stopped or failed), write the same metrics to this file atomically, in the text format of node_exporter's textfile collector (name it *.prom in its directory)")
}

// runMetrics is one run's registry, server and file.
type runMetrics struct {
	reg    *prometheus.Registry
	wrap   prometheus.Registerer
	file   string
	srv    *http.Server
	addr   string
	served chan struct{}

	calls      *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	retries    *prometheus.CounterVec
	reconciles *prometheus.CounterVec
}

// startMetrics returns nil when neither flag is set.
func startMetrics(f *metricsFlags, db tracker.Backend, job *sluice.Job, log zerolog.Logger) (*runMetrics, error) {
	if f.addr == "" && f.file == "" {
		return nil, nil
	}
	pricesInForce() // set now: scrapes only read it
	m := &runMetrics{reg: prometheus.NewRegistry(), file: f.file}
	m.wrap = prometheus.WrapRegistererWith(prometheus.Labels{"job_id": job.ID}, m.reg)
	m.calls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_api_requests_total",
		Help: "HTTP requests to the provider API, by endpoint (ids as {id}), method and status code (0: no answer)."},
		[]string{"endpoint", "method", "code"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_api_request_duration_seconds",
		Help:    "Time to the provider API's answer headers, by endpoint and method.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}},
		[]string{"endpoint", "method"})
	m.retries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_api_retries_total",
		Help: "Failed provider API attempts that were repeated, by endpoint and method."}, []string{"endpoint", "method"})
	m.reconciles = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_reconciles_total",
		Help: "Lookups at the provider of what a call may have done: kind chunk (left mid-call by a killed run) or call (an answer lost)."},
		[]string{"kind"})
	start := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_run_start_time_seconds", Help: "When this run started, in unix seconds."})
	start.SetToCurrentTime()
	m.wrap.MustRegister(m.calls, m.latency, m.retries, m.reconciles, start, &jobCollector{db: db, job: job})
	m.reconciles.WithLabelValues("chunk")
	m.reconciles.WithLabelValues("call")
	telemetry.Set(m)
	if f.addr != "" {
		ln, err := net.Listen("tcp", f.addr)
		if err != nil {
			telemetry.Set(nil)
			return nil, fmt.Errorf("--metrics-addr %s: %w", f.addr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
		m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		m.addr = ln.Addr().String()
		m.served = make(chan struct{})
		go func() { defer close(m.served); m.srv.Serve(ln) }()
		log.Info().Str("metrics_addr", m.addr).Msg("serving Prometheus metrics at /metrics")
	}
	return m, nil
}

// APICall implements telemetry.Sink.
func (m *runMetrics) APICall(endpoint, method string, code int, d time.Duration) {
	m.calls.WithLabelValues(endpoint, method, fmt.Sprint(code)).Inc()
	m.latency.WithLabelValues(endpoint, method).Observe(d.Seconds())
}

// APIRetry implements telemetry.Sink.
func (m *runMetrics) APIRetry(endpoint, method string) {
	m.retries.WithLabelValues(endpoint, method).Inc()
}

// Reconcile implements telemetry.Sink.
func (m *runMetrics) Reconcile(kind string) { m.reconciles.WithLabelValues(kind).Inc() }

// close writes the metrics file (with the run's end and exit code) and
// stops the server.
func (m *runMetrics) close(exit int, log zerolog.Logger) {
	if m == nil {
		return
	}
	telemetry.Set(nil)
	end := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_run_end_time_seconds", Help: "When this run ended, in unix seconds."})
	end.SetToCurrentTime()
	code := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_run_exit_code", Help: "The exit code of this run (docs/contract.md)."})
	code.Set(float64(exit))
	m.wrap.MustRegister(end, code)
	if m.file != "" {
		if err := m.writeFile(); err != nil {
			log.Error().Err(err).Str("path", m.file).Msg("--metrics-file not written")
		}
	}
	if m.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.srv.Shutdown(ctx)
		<-m.served
	}
}

// writeFile writes the metrics to a temp file beside m.file, mode 0666
// less the umask, and renames it over m.file.
func (m *runMetrics) writeFile() error {
	mfs, err := m.reg.Gather()
	if err != nil && len(mfs) == 0 {
		return err
	}
	f, err := atomicfile.CreateMode(m.file, 0o666)
	if err != nil {
		return err
	}
	enc := expfmt.NewEncoder(f, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			f.Abort()
			return err
		}
	}
	return f.Commit()
}

// jobCollector reads the job's figures from the tracker at each scrape.
type jobCollector struct {
	db  tracker.Backend
	job *sluice.Job
	mu  sync.Mutex // one read of the tracker at a time
}

var (
	descRequests  = prometheus.NewDesc("sluice_requests", "The job's requests by state (pending, succeeded, failed).", []string{"state"}, nil)
	descPlanned   = prometheus.NewDesc("sluice_requests_planned", "Requests the job's plan holds.", nil, nil)
	descRejected  = prometheus.NewDesc("sluice_input_lines_rejected", "Input lines the plan rejected.", nil, nil)
	descRetried   = prometheus.NewDesc("sluice_requests_retried", "Requests sent again in retry batches.", nil, nil)
	descBatches   = prometheus.NewDesc("sluice_batches", "The job's batches (chunks) by state.", []string{"state"}, nil)
	descLive      = prometheus.NewDesc("sluice_batches_live", "Batches being created or running at the provider.", nil, nil)
	descEstTokens = prometheus.NewDesc("sluice_input_tokens_estimated", "sluice's estimate of the job's input tokens.", nil, nil)
	descInTokens  = prometheus.NewDesc("sluice_input_tokens_reported", "Input tokens the provider reported for ended batches.", nil, nil)
	descOutTokens = prometheus.NewDesc("sluice_output_tokens_reported", "Output tokens the provider reported for ended batches.", nil, nil)
	descSpend     = prometheus.NewDesc("sluice_spend_usd", "Provider usage of ended batches priced, in US dollars.", nil, nil)
	descCommitted = prometheus.NewDesc("sluice_spend_committed_usd", "Spend plus live batches at their upper bound, in US dollars.", nil, nil)
	descCap       = prometheus.NewDesc("sluice_spend_cap_usd", "The job's --max-cost, in US dollars (absent when none).", nil, nil)
	descUp        = prometheus.NewDesc("sluice_tracker_up", "1 when the tracker answered this scrape, else 0.", nil, nil)
)

func (c *jobCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRequests, descPlanned, descRejected, descRetried, descBatches, descLive,
		descEstTokens, descInTokens, descOutTokens, descSpend, descCommitted, descCap, descUp} {
		ch <- d
	}
}

func (c *jobCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	states, err1 := c.db.RequestStates(ctx, c.job.ID)
	chunks, err2 := c.db.Chunks(ctx, c.job.ID)
	retried, err3 := c.db.RetriedRequests(ctx, c.job.ID)
	if err := errors.Join(err1, err2, err3); err != nil {
		gauge(descUp, 0)
		return
	}
	gauge(descUp, 1)
	for _, s := range []sluice.RequestState{sluice.RequestPending, sluice.RequestSucceeded, sluice.RequestFailed} {
		gauge(descRequests, float64(states[s]), string(s))
	}
	gauge(descPlanned, float64(c.job.Requests))
	gauge(descRejected, float64(c.job.Rejected))
	gauge(descRetried, float64(retried))
	byState := map[sluice.ChunkState]int{}
	var live int
	var est, in, out int64
	for _, ch := range chunks {
		byState[ch.State]++
		if ch.State.Live() {
			live++
		}
		est += ch.EstTokens
		in += ch.InputTokens
		out += ch.OutputTokens
	}
	for _, s := range []sluice.ChunkState{sluice.ChunkPending, sluice.ChunkUploading, sluice.ChunkUploaded,
		sluice.ChunkCreating, sluice.ChunkSubmitted, sluice.ChunkDone, sluice.ChunkFailed} {
		gauge(descBatches, float64(byState[s]), string(s))
	}
	gauge(descLive, float64(live))
	gauge(descEstTokens, float64(est))
	gauge(descInTokens, float64(in))
	gauge(descOutTokens, float64(out))
	if m := jobMoney(ctx, c.db, c.job, chunks); m != nil {
		if m.ActualUSD != nil {
			gauge(descSpend, float64(*m.ActualUSD))
		}
		if m.CommittedUSD != nil {
			gauge(descCommitted, float64(*m.CommittedUSD))
		}
		if m.CapUSD != nil {
			gauge(descCap, float64(*m.CapUSD))
		}
	}
}

// runExitCode is the exit code a run ending with err makes.
func runExitCode(err error, cancelled bool) int {
	switch {
	case err == nil:
		return exitOK
	case cancelled && errors.Is(err, context.Canceled):
		return exitStopped
	}
	return codeOf(err)
}
