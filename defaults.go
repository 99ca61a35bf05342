package sluice

import "time"

// Defaults of a job's life, defined once: the dispatcher fills unset
// options with them, the lifecycle package picks among them, and the
// command's --help texts print them. The HTTP layer's retry defaults are
// provider/httpx.DefaultMaxAttempts and DefaultMaxTotalWait.
const (
	// DefaultMaxAttempts is how many attempts a request gets: requests that
	// expire, are cancelled, or fail with 429/5xx go to new batches until
	// they have had this many.
	DefaultMaxAttempts = 3
	// DefaultConcurrency bounds provider calls in flight (uploads, creates,
	// polls, downloads).
	DefaultConcurrency = 4
	// DefaultPollInterval is the first wait before polling a new batch;
	// waits grow by half each poll up to DefaultMaxPollInterval.
	DefaultPollInterval    = 10 * time.Second
	DefaultMaxPollInterval = 2 * time.Minute
	// DefaultReconcileGrace is how long after a crashed run's intent sluice
	// keeps looking at the provider for what the call created before
	// concluding it never landed (docs/crash-safety.md).
	DefaultReconcileGrace = 2 * time.Minute
	// DefaultStuckAfter is how long after its submission a batch that has
	// not ended is cancelled and its requests retried: the 24h completion
	// window of every provider, plus 2h.
	DefaultStuckAfter = 26 * time.Hour
	// DefaultStuckCancelWait is how long a stuck batch may take to end
	// after sluice asked the provider to cancel it.
	DefaultStuckCancelWait = 30 * time.Minute
	// DefaultMaxFetchFailures is how many polls in a row may fail to get an
	// ended batch's results before the attempt fails.
	DefaultMaxFetchFailures = 5
	// DefaultMaxQueueRefusals is how many times in a row a chunk of one
	// request submitted alone may be refused as over the enqueued-token
	// limit before its request fails for good (a chunk of more is split:
	// dispatcher/split.go).
	DefaultMaxQueueRefusals = 3

	// LocalPollInterval and LocalMaxPollInterval replace the poll defaults
	// for --provider local, whose batches live in this process.
	LocalPollInterval    = 200 * time.Millisecond
	LocalMaxPollInterval = 2 * time.Second
	// LocalReconcileGrace replaces DefaultReconcileGrace for --provider
	// local: the in-process emulator died with the run, nothing lands later.
	LocalReconcileGrace = time.Millisecond

	// CancelPollInterval and CancelMaxPollInterval are the poll defaults
	// while `sluice cancel` waits for cancelled batches to end (they end
	// within minutes); LocalCancel* for --provider local.
	CancelPollInterval         = 5 * time.Second
	CancelMaxPollInterval      = 30 * time.Second
	LocalCancelPollInterval    = 200 * time.Millisecond
	LocalCancelMaxPollInterval = time.Second
)
