package sluice

import "os"

// PlanLegacyKeys reports SLUICE_PLAN_LEGACY_KEYS=1: jobs are planned as
// sluice planned them before ledger keys were canonical (docs/money.md),
// their requests keyed on the body's bytes without whitespace and the job
// recorded as one of the old keys. It exists for tests of state
// directories made by an older sluice; nobody else has a reason to set it.
func PlanLegacyKeys() bool { return os.Getenv("SLUICE_PLAN_LEGACY_KEYS") == "1" }

// Learned is what finished batches of one model taught about sluice's
// estimates (docs/money.md): the provider's usage of the requests whose
// results reported usage, against sluice's input estimate of exactly those
// requests.
type Learned struct {
	EstTokens    int64 `json:"est_input_tokens"` // sluice's estimate of their input
	InputTokens  int64 `json:"input_tokens"`     // the provider's usage
	OutputTokens int64 `json:"output_tokens"`
}

// InputRatio is the provider's input usage per estimated token, when any
// was learned.
func (l Learned) InputRatio() (float64, bool) {
	if l.EstTokens <= 0 || l.InputTokens <= 0 {
		return 0, false
	}
	return float64(l.InputTokens) / float64(l.EstTokens), true
}

// OutputRatio is the output per input token the provider reported, when
// any was learned.
func (l Learned) OutputRatio() (float64, bool) {
	if l.InputTokens <= 0 {
		return 0, false
	}
	return float64(l.OutputTokens) / float64(l.InputTokens), true
}

// Add sums two lessons.
func (l Learned) Add(o Learned) Learned {
	return Learned{EstTokens: l.EstTokens + o.EstTokens, InputTokens: l.InputTokens + o.InputTokens,
		OutputTokens: l.OutputTokens + o.OutputTokens}
}

// Answer is an earlier job's succeeded result for a request body, found in
// the ledger of bought answers (docs/money.md).
type Answer struct {
	SourceJob string
	// Results is the absolute path of the results file holding it; Offset
	// and Length locate its record there.
	Results        string
	Offset, Length int64
	// CustomID is the custom_id of the request it answered.
	CustomID string
}
