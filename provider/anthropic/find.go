package anthropic

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// ErrAmbiguous: more than one batch fits a chunk's description, so Find
// cannot tell which one a crashed run created. The caller decides (waiting
// for the candidates to end and matching their custom_ids is the only
// certain way).
var ErrAmbiguous = errors.New("several batches match; cannot tell which one")

// Find looks for the batch a previous run created for ref.
//
// Anthropic batches carry no metadata and there is no input file, so the
// match is heuristic: a batch whose request counts add up to ref.Requests
// and whose created_at falls in the intent window, from ref.IntentAt minus
// FindSkew to ref.IntentAt plus FindWindow, and that is not already
// claimed (Config.Claimed, or created by this process). It lists GET
// /v1/messages/batches newest first, paged with after_id, and stops at a
// page older than the window. Exactly one candidate is adopted; none is
// ("", "", nil); several is an error wrapping ErrAmbiguous. Without an
// intent time there is no window: the error wraps sluice.ErrNoListing.
//
// The heuristic fails only when two chunks with the same request count
// were both being created inside one window and a crash hit both, or when
// a batch was created with that count at that moment outside this state
// directory (another sluice with the same key, outside sluice). A batch
// created before the intent (less FindSkew, DefaultFindSkew: the clocks'
// difference) is never adopted: it was made for other content, perhaps
// under the same job name (docs/crash-safety.md, "Reconcile").
// fileID is always "".
func (c *Client) Find(ctx context.Context, ref sluice.BatchRef) (fileID, batchID string, err error) {
	if ref.IntentAt.IsZero() {
		return "", "", fmt.Errorf("find batch of chunk %d: no intent time: %w", ref.Chunk, sluice.ErrNoListing)
	}
	id, err := c.FindSince(ctx, ref, ref.IntentAt)
	return "", id, err
}

// FindSince is Find with the intent time given: it adopts a batch created
// between since - FindSkew and since + FindWindow.
func (c *Client) FindSince(ctx context.Context, ref sluice.BatchRef, since time.Time) (string, error) {
	b, err := c.find(ctx, ref, since, since.Add(c.FindBack))
	if err != nil {
		return "", fmt.Errorf("find batch of chunk %d: %w", ref.Chunk, err)
	}
	if b == nil {
		return "", nil
	}
	c.own.Store(b.ID, true)
	return b.ID, nil
}

// find returns the one batch matching ref created in [from-skew, to].
func (c *Client) find(ctx context.Context, ref sluice.BatchRef, from, to time.Time) (*messageBatch, error) {
	lo, hi := from.Add(-c.skew), to.Add(c.skew)
	var found []messageBatch
	l := provider.Listing[messageBatch]{
		Page: func(ctx context.Context, after string) (provider.Page[messageBatch], error) {
			q := url.Values{"limit": {"100"}}
			if after != "" {
				q.Set("after_id", after)
			}
			var l struct {
				Data    []messageBatch `json:"data"`
				HasMore bool           `json:"has_more"`
				LastID  string         `json:"last_id"`
			}
			if err := c.HC.JSON(ctx, httpx.Call{Method: http.MethodGet, URL: c.url("/v1/messages/batches", q)}, &l); err != nil {
				return provider.Page[messageBatch]{}, err
			}
			last := ""
			if len(l.Data) > 0 {
				last = l.Data[len(l.Data)-1].ID
			}
			return provider.Page[messageBatch]{Items: l.Data, Next: provider.Cursor(l.HasMore, l.LastID, last)}, nil
		},
		Created: func(b *messageBatch) time.Time { return b.CreatedAt },
		Cutoff:  lo,
	}
	err := l.Each(ctx, func(b *messageBatch) bool {
		if !b.CreatedAt.Before(lo) && !b.CreatedAt.After(hi) && b.total() == ref.Requests && !c.isClaimed(b.ID) {
			found = append(found, *b)
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	switch len(found) {
	case 0:
		return nil, nil
	case 1:
		return &found[0], nil
	}
	ids := make([]string, len(found))
	for i, b := range found {
		ids[i] = b.ID
	}
	return nil, fmt.Errorf("%w: %s", ErrAmbiguous, strings.Join(ids, ", "))
}

func (c *Client) isClaimed(id string) bool {
	if _, ok := c.own.Load(id); ok {
		return true
	}
	return c.claimed != nil && c.claimed(id)
}
