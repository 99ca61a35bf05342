package main

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"
)

// TestKilledMidSplitIsPlannedAgain: a plan SIGKILLed while splitting leaves
// a job that is never trusted; the next run plans it again from scratch and
// gets every request exactly once.
func TestKilledMidSplitIsPlannedAgain(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	dir := t.TempDir()
	in, ids := writeInput(t, dir, 300_000)
	env := stateEnv(dir)
	// Kill until a run dies with its job recorded as planning (not before
	// the job row, not after the commit).
	midSplit := false
	for _, d := range []time.Duration{150 * time.Millisecond, 300 * time.Millisecond, 500 * time.Millisecond, 800 * time.Millisecond} {
		if k, _ := killAfter(t, sluiceCmd(env, "plan", in, "--max-batch-requests", "5000"), d); !k {
			break
		}
		st := runSluice(t, env, "status", "--json")
		var doc struct{ Jobs []struct{ State string } }
		json.Unmarshal([]byte(st.stdout), &doc)
		if len(doc.Jobs) == 1 && doc.Jobs[0].State == "planning" {
			midSplit = true
			break
		}
	}
	if !midSplit {
		t.Fatal("no kill landed while the job was being planned")
	}
	r := runSluice(t, env, "plan", in, "--max-batch-requests", "5000", "--json")
	if r.code != 0 {
		t.Fatalf("plan after the kill: exit %d\n%s", r.code, r.stderr)
	}
	var plan struct {
		Requests int64
		Reused   bool
		Chunks   []struct{ Requests int }
	}
	if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil {
		t.Fatal(err)
	}
	sum := 0
	for _, c := range plan.Chunks {
		sum += c.Requests
	}
	if plan.Reused || plan.Requests != int64(len(ids)) || sum != len(ids) {
		t.Fatalf("plan after a killed split: reused %v, %d requests, %d in chunks; want a fresh plan of %d", plan.Reused, plan.Requests, sum, len(ids))
	}
	checkIntegrity(t, filepath.Join(dir, "state"))
}
