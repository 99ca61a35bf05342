package splitter

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-batch/sluice"
)

// A provider with a minimum of requests per batch (Limits.MinBatchRequests:
// Amazon Bedrock's minimum records per job) refuses a batch under it, so
// no chunk may fall under it, and where a group of requests (a url and a
// model) ends is not known until the input does. So Split first counts
// each group's valid requests in a pass that writes nothing
// (countGroups), then cuts each group into balanced chunks: a chunk opened
// with R of its group's requests left is to hold ceil(R/k) of them, k =
// ceil(R/MaxBatchRequests) the chunks they need, so the last chunks differ
// by one request at most (11 requests under a maximum of 5 are cut 4, 4,
// 3, not 5, 5, 1). A group under the minimum is refused with its count,
// and so is a chunk that the other limits (bytes, tokens) close under it:
// ErrBelowMinimum, bad input (exit 2), before anything is sent. Input that
// changes between the passes is caught as it always is (the fingerprint
// the plan records), or by a chunk under the minimum.

// ErrBelowMinimum is wrapped by the error of a plan with a group of
// requests smaller than the provider's minimum of requests per batch, or
// that the other limits leave no way to cut into chunks of at least the
// minimum.
var ErrBelowMinimum error = &sluice.Error{Code: sluice.CodeInvalid, Err: errors.New("under the provider's minimum of requests per batch")}

// countGroups reads the input once, as Split does, and counts the valid
// requests of each group. Without SkipInvalid the first line that does
// not validate is the error (as the pass that plans reports it); with it,
// such lines are left to that pass, which rejects them. Duplicates of a
// custom_id are counted, which can only make a group's last chunk short,
// then refused.
func countGroups(ctx context.Context, cfg Config) (map[groupKey]int, error) {
	in, err := openInput(cfg.Input, cfg.Open)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	cfg.Progress = nil
	sp := newRun(ctx, cfg, nil, in)
	wg := sp.startParsing()
	counts := map[groupKey]int{}
	err = func() error {
		for b := range sp.ordered {
			<-b.done
			if err := ctx.Err(); err != nil {
				return err
			}
			if b.err != nil {
				return fmt.Errorf("%s: read failed: %w", cfg.Input, b.err.(*readErr).err)
			}
			for i := range b.recs {
				r := &b.recs[i]
				switch {
				case r.reason == "":
					counts[groupKey{r.url, r.model}]++
				case !cfg.SkipInvalid:
					// The first bad line is the error, as the planning
					// pass would report it, not a group's count short of
					// the minimum because the line did not count.
					return &LineError{File: cfg.Input, Line: r.line, CustomID: r.customID, Reason: r.reason}
				}
			}
			sp.putBlock(b)
		}
		return nil
	}()
	sp.stop(wg)
	return counts, err
}

// counted checks a new group against the minimum and sets how many of its
// requests are to come.
func (w *writer) counted(g *group) error {
	if w.cfg.counts == nil || g.lim.MinBatchRequests <= 1 {
		return nil
	}
	g.left = w.cfg.counts[groupKey{g.url, g.model}]
	if g.left < g.lim.MinBatchRequests {
		return fmt.Errorf("%s: %s has %d request(s), %w of %d: add requests for it, or send them to a provider without a minimum",
			w.cfg.Input, groupName(g), g.left, ErrBelowMinimum, g.lim.MinBatchRequests)
	}
	return nil
}

// balanced is how many requests a chunk opened with left requests of its
// group still to come is to hold: 0 (no target) without a minimum.
func balanced(left int, lim *sluice.Limits) int {
	if lim.MinBatchRequests <= 1 || left <= 0 {
		return 0
	}
	max := lim.MaxBatchRequests
	if max <= 0 || left <= max {
		return left
	}
	k := (left + max - 1) / max
	return (left + k - 1) / k
}

// belowMinimum is the error of a chunk the limits closed under the
// minimum.
func (w *writer) belowMinimum(g *group) error {
	return fmt.Errorf("%s: a batch of %s would hold %d request(s), %w of %d: the other limits (--max-batch-bytes %d, --max-batch-tokens %d) leave no room to cut batches of at least the minimum",
		w.cfg.Input, groupName(g), g.n, ErrBelowMinimum, g.lim.MinBatchRequests, g.lim.MaxBatchBytes, g.lim.MaxBatchTokens)
}

func groupName(g *group) string {
	if g.model == "" {
		return "url " + g.url
	}
	return fmt.Sprintf("model %q", g.model)
}
