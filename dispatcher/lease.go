package dispatcher

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-batch/sluice"
)

// leased wraps task, a step on chunk c chosen from the state c was read
// in at now, so that it runs only under c's lease (Options.Claim): when
// another worker holds the chunk, the step is skipped; when the chunk
// moved since it was read (another worker acted on it meanwhile), the
// step is skipped too, and the next round decides again from the fresh
// state. Without Options.Claim the task runs as it is.
func (d *Dispatcher) leased(c *sluice.Chunk, now time.Time, task func(context.Context) (bool, error)) func(context.Context) (bool, error) {
	if d.opts.Claim == nil {
		return task
	}
	state, attempt, due := c.State, c.Attempt, c.NextPollAt
	return func(ctx context.Context) (bool, error) {
		release, ok, err := d.opts.Claim(ctx, c)
		if err != nil {
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			return false, fatal(fmt.Errorf("lease chunk %d: %w", c.ID, err))
		}
		if !ok {
			return false, nil // another worker holds it
		}
		defer release()
		if c.State != state || c.Attempt != attempt {
			return true, nil // moved by another worker: decide again
		}
		if !d.opts.Once && c.NextPollAt.After(now) && !due.After(now) {
			return false, nil // another worker did this step; the next is not due
		}
		return task(ctx)
	}
}
