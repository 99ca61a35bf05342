package sluice

import "time"

// Worker is one process driving a job beside others (docs/scale-out.md,
// "Many workers"): the same `sluice run` started several times joins the
// same job, and every chunk's next step is leased to one worker at a time.
type Worker struct {
	// ID names the worker uniquely among the job's workers, for its whole
	// life: host, pid and a random suffix (a pid is reused).
	ID   string
	Host string
	PID  int
	// Started is when the worker registered; Heartbeat when it last said
	// it is alive (its leases run until Heartbeat plus their time to live).
	Started, Heartbeat time.Time
	// Leases is how many chunk leases the worker holds that have not
	// expired.
	Leases int
}

// Roles a single worker of a job holds at a time (leased like chunks).
const (
	// RolePlan is held by the worker that plans the job; the others wait
	// for the plan.
	RolePlan = "plan"
	// RoleMerge is held by the worker that merges the job's results into
	// its output once every request is final; the others exit.
	RoleMerge = "merge"
)
